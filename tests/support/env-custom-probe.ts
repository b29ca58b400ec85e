// Run by tests/unit/env-custom.test.ts as `node bin/run-ts.js tests/support/env-custom-probe.ts FILE`,
// i.e. the way the CLI runs (plain Node, TypeScript through tsx): loads the faulty fixture, lets one
// step loop forever, and prints what happened as JSON. The process must then exit on its own.
import { EnvError } from '../../src/env/guard.ts';
import { resolveEnvironment } from '../../src/env/resolve-node.ts';

const module = await resolveEnvironment(process.argv[2], { stepTimeoutMs: 300 });
const env = await module.make({ fault: 'loop', at: 2 });
await env.reset({ seed: 1 });
const first = (await env.step('up')).observation;
let error: { kind: string; step: number | undefined } | null = null;
try {
  await env.step('up');
} catch (e) {
  if (!(e instanceof EnvError)) throw e;
  error = { kind: e.kind, step: e.step };
}
await env.reset({ seed: 2 });
const afterReset = (await env.step('up')).observation;
console.log(JSON.stringify({ id: module.id, first, error, afterReset }));
