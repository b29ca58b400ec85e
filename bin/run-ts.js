#!/usr/bin/env node
// Runs a TypeScript script of this project (benchmarks, model builders) under plain Node.
import './register.js';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';

const [script, ...rest] = process.argv.slice(2);
if (!script) {
  console.error('usage: node bin/run-ts.js SCRIPT.ts [args...]');
  process.exit(2);
}
process.argv = [process.argv[0], resolve(script), ...rest];
await import(pathToFileURL(resolve(script)).href);
