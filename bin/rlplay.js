#!/usr/bin/env node
// The rlplay command line: runs src/cli/main.ts on the same engine the browser app uses.
import './register.js';

const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
