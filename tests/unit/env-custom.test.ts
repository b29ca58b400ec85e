// Custom environments, loaded safely and failing cleanly: the guard's validation of everything an
// environment returns, custom modules run in worker threads (a synchronous infinite loop is
// stopped at the time limit and the next episode starts on a fresh worker), clear errors for files
// that do not load, and resolveEnvironment for `--env <id | path>`.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BUILTIN_ENVIRONMENTS } from '../../src/env/builtin/index.ts';
import { DEFAULT_STEP_TIMEOUT_MS, EnvError, guardEnvModule, validateEnvModule } from '../../src/env/guard.ts';
import { loadEnvFile, type WorkerEnvModule } from '../../src/env/load-node.ts';
import { resolveEnvironment } from '../../src/env/resolve-node.ts';
import type { Env, EnvModule, StepResult } from '../../src/env/types.ts';

const ROOT = join(import.meta.dirname, '../..');
const FIXTURES = join(import.meta.dirname, '../fixtures/envs');
const fixture = (name: string) => relative(process.cwd(), join(FIXTURES, name));
const LIMIT = 300;

/** The EnvError a promise rejects with (fails the test if it resolves or rejects otherwise). */
async function envError(call: unknown): Promise<EnvError> {
  try {
    await (typeof call === 'function' ? call() : call);
  } catch (error) {
    if (error instanceof EnvError) return error;
    throw new Error(`expected an EnvError, got ${String(error)}`, { cause: error });
  }
  throw new Error('expected an EnvError, but the call succeeded');
}

interface Transcript {
  observations: string[];
  actions: string[];
  results: StepResult[];
}

/** One episode, always taking the `pick`-th valid action. */
async function playEpisode(env: Env, seed: number, maxSteps: number, pick = 0): Promise<Transcript> {
  const reset = await env.reset({ seed, options: { split: 'train' } });
  const log: Transcript = { observations: [reset.observation], actions: [], results: [] };
  for (let t = 0; t < maxSteps; t++) {
    const actions = await env.validActions!();
    const action = actions[Math.min(pick, actions.length - 1)];
    const result = await env.step(action);
    log.actions.push(action);
    log.results.push(result);
    if (result.terminated || result.truncated) break;
  }
  return log;
}

describe('guardEnvModule on in-process environments', () => {
  test('built-ins pass through unchanged, keep a synchronous make() and their expert', async () => {
    for (const builtin of BUILTIN_ENVIRONMENTS.values()) {
      const guarded = guardEnvModule(builtin);
      expect([guarded.id, guarded.description, guarded.maxEpisodeSteps]).toEqual([builtin.id, builtin.description, builtin.maxEpisodeSteps]);
      const [raw, checked] = [builtin.make(), guarded.make()];
      expect(checked).not.toBeInstanceOf(Promise);
      expect(await checked.reset({ seed: 5 })).toEqual(await raw.reset({ seed: 5 }));
      for (let t = 0; t < builtin.maxEpisodeSteps; t++) {
        expect(await checked.validActions!()).toEqual(await raw.validActions!());
        const action = await checked.expertAction();
        expect(action).toBe(raw.expertAction());
        const [a, b] = [await raw.step(action), await checked.step(action)];
        expect(b).toEqual(a);
        if (a.terminated || a.truncated) break;
      }
      await checked.close?.();
    }
  });

  const module = (step: (n: number) => unknown): EnvModule => ({
    id: 'inline',
    description: 'test',
    maxEpisodeSteps: 5,
    make() {
      let n = 0;
      return {
        reset: () => ((n = 0), { observation: 'start', info: {} }),
        step: () => step(++n) as StepResult,
      };
    },
  });
  const fine = { observation: 'ok', reward: 0, terminated: false, truncated: false, info: {} };

  test('a NaN reward names the environment, the method, the step and the rule', async () => {
    const env = await guardEnvModule(module((n) => (n === 3 ? { ...fine, reward: NaN } : fine))).make();
    await env.reset({ seed: 1 });
    await env.step('a');
    await env.step('b');
    const error = await envError(env.step('c'));
    expect(error.message).toContain('environment "inline": step() returned reward NaN at step 3; rewards must be finite numbers. Fix: ');
    expect([error.method, error.step, error.kind, error.env]).toEqual(['step', 3, 'malformed', '"inline"']);
  });

  test("a throw keeps the environment's message and the step", async () => {
    const env = await guardEnvModule(module(() => { throw new TypeError('state is undefined'); })).make();
    await env.reset({ seed: 1 });
    const error = await envError(env.step('a'));
    expect(error.message).toMatch(/^environment "inline": step\(\) threw at step 1: TypeError: state is undefined \(at .*env-custom\.test\.ts:\d+:\d+\)\. Fix: .*must never throw/);
    expect(error.cause).toBeInstanceOf(TypeError);
  });

  test('an async call that never settles fails at the limit, and the instance waits for reset()', async () => {
    const guarded = guardEnvModule(module((n) => (n === 2 ? new Promise(() => {}) : fine)), { stepTimeoutMs: LIMIT });
    const env = await guarded.make();
    await env.reset({ seed: 1 });
    await env.step('a');
    const started = performance.now();
    const error = await envError(env.step('b'));
    expect(performance.now() - started).toBeGreaterThanOrEqual(LIMIT - 5);
    expect(error.message).toContain(`step() did not finish within ${LIMIT} ms at step 2`);
    expect(error.kind).toBe('timeout');
    expect((await envError(env.step('c'))).kind).toBe('stopped');
    await env.reset({ seed: 2 });
    expect(await env.step('d')).toEqual(fine);
  });

  test('module shape, make() results and the limit option are checked', () => {
    expect(() => validateEnvModule({ id: 'ok', description: 'fine', maxEpisodeSteps: 3, make() {} })).not.toThrow();
    const error = (() => {
      try {
        guardEnvModule({ id: 'x y', description: 3, maxEpisodeSteps: 2.5, make: null } as unknown as EnvModule);
      } catch (e) {
        return e as EnvError;
      }
    })()!;
    expect(error).toBeInstanceOf(EnvError);
    for (const part of ['id "x y" (a string)', 'description 3', 'maxEpisodeSteps 2.5', 'make null', 'export default { id, description, maxEpisodeSteps, make }']) expect(error.message).toContain(part);
    const noStep = guardEnvModule({ id: 'half', description: '', maxEpisodeSteps: 1, make: () => ({ reset: () => ({ observation: '', info: {} }) }) as unknown as Env });
    expect(() => noStep.make()).toThrow(/make\(\) returned an Env that breaks the contract: it has no step\(\)/);
    expect(() => guardEnvModule(BUILTIN_ENVIRONMENTS.get('reasoning')!, { stepTimeoutMs: -1 })).toThrow(/stepTimeoutMs is -1/);
    expect(DEFAULT_STEP_TIMEOUT_MS).toBe(5000);
  });
});

describe('custom environment files in worker threads', () => {
  let faulty: WorkerEnvModule;
  beforeAll(async () => {
    faulty = await loadEnvFile(fixture('faulty.js'), { stepTimeoutMs: LIMIT });
  });
  afterAll(async () => {
    await faulty?.dispose();
  });

  const made = (fault: string, at = 2) => faulty.make({ fault, at });

  test('the example of docs/environments.md is the fixture, and it runs the same in a worker as in-process', async () => {
    const doc = await readFile(join(ROOT, 'docs/environments.md'), 'utf8');
    const block = /```js\n(\/\/ word-guess\.js[\s\S]*?)```/.exec(doc);
    expect(block, 'docs/environments.md has the word-guess.js example').not.toBeNull();
    expect(await readFile(join(FIXTURES, 'word-guess.js'), 'utf8')).toBe(block![1]);

    const inWorker = await loadEnvFile(fixture('word-guess.js'));
    const url = pathToFileURL(join(FIXTURES, 'word-guess.js')).href;
    const inProcess = guardEnvModule((await import(url)).default as EnvModule);
    expect([inWorker.id, inWorker.description, inWorker.maxEpisodeSteps]).toEqual([inProcess.id, inProcess.description, inProcess.maxEpisodeSteps]);
    const [a, b] = [await inWorker.make(), await inProcess.make()];
    for (const [seed, pick] of [[1, 0], [2, 3], [3, 7]]) {
      const episode = await playEpisode(a, seed, inWorker.maxEpisodeSteps, pick);
      expect(episode).toEqual(await playEpisode(b, seed, inProcess.maxEpisodeSteps, pick));
      expect(episode.results.at(-1)!.info.success).toBeTypeOf('boolean');
    }
    await Promise.all([a.close!(), b.close!()]);
    await inWorker.dispose();
  });

  test("a throw in step() is an EnvError with the environment's message, file and step", async () => {
    const env = await made('throw');
    await env.reset({ seed: 1 });
    await env.step('up');
    const error = await envError(env.step('down'));
    expect(error.message).toMatch(/^environment "faulty" \(.*faulty\.js\): step\(\) threw at step 2: Error: the counter overflowed on "down" \(at .*faulty\.js:\d+:\d+\)\. Fix: /);
    expect([error.kind, error.method, error.step]).toEqual(['threw', 'step', 2]);
    // The instance survives a throw: the next episode runs on the same worker.
    await env.reset({ seed: 2 });
    expect((await env.step('up')).observation).toBe('step 1');
    const thrownString = await made('throw-string', 1);
    await thrownString.reset({ seed: 1 });
    expect((await envError(thrownString.step('up'))).message).toContain('step() threw at step 1: "just a string" (a string, not an Error)');
    await Promise.all([env.close!(), thrownString.close!()]);
  });

  test('a NaN reward, missing fields and other malformed results are EnvErrors', async () => {
    const cases: [string, string][] = [
      ['nan', 'step() returned reward NaN at step 2; rewards must be finite numbers'],
      ['missing', 'step() returned a malformed result at step 2: no reward (rewards must be finite numbers); no terminated (terminated must be a boolean); no truncated (truncated must be a boolean); no info (info must be an object)'],
      ['not-object', 'step() returned "done" (a string) at step 2, not an object'],
      ['uncloneable', "step() returned a value that cannot leave the environment's worker at step 2"],
      ['bad-success', 'step() returned info.success "yes" (a string) at step 2; info.success must be a boolean when set'],
      ['empty-actions', 'validActions() returned an empty array before step 2'],
      ['number-actions', 'validActions() returned 7 at index 1 before step 2; every action must be a non-empty string'],
    ];
    for (const [fault, message] of cases) {
      const env = await made(fault);
      await env.reset({ seed: 1 });
      const error = await envError(async () => {
        for (let t = 0; t < 3; t++) {
          await env.validActions!();
          await env.step('up');
        }
      });
      expect(error.message, fault).toContain(message);
      expect(error.kind, fault).toBe('malformed');
      await env.close!();
    }
  });

  test('while (true) {} in step() is stopped at the limit; the next episode runs on a fresh worker', async () => {
    const env = await made('loop');
    await env.reset({ seed: 1 });
    await env.step('up');
    const started = performance.now();
    const error = await envError(env.step('up'));
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(LIMIT - 5);
    expect(elapsed).toBeLessThan(LIMIT + 2000);
    expect(error.message).toContain(`environment "faulty" (${fixture('faulty.js')}): step() did not finish within ${LIMIT} ms at step 2; its worker was stopped. Fix: `);
    expect([error.kind, error.step]).toEqual(['timeout', 2]);
    expect((await envError(env.step('up'))).kind).toBe('stopped');
    // A new episode on the same instance: reset() starts a fresh worker.
    const reset = await env.reset({ seed: 7 });
    expect(reset.observation).toBe('start 7');
    expect((await env.step('up')).observation).toBe('step 1');
    // A new instance works too.
    const other = await made('none');
    expect((await playEpisode(other, 3, 3)).results).toHaveLength(3);
    await Promise.all([env.close!(), other.close!()]);
  });

  test("one instance's timeout leaves the instances stepped beside it alone", async () => {
    const envs = await Promise.all([made('none'), made('loop', 3), made('none'), made('async-loop', 2)]);
    await Promise.all(envs.map((env, i) => env.reset({ seed: i })));
    const outcomes = await Promise.all(envs.map(async (env) => {
      try {
        for (let t = 0; t < 5; t++) await env.step('up');
        return 'ok';
      } catch (error) {
        return (error as EnvError).kind;
      }
    }));
    expect(outcomes).toEqual(['ok', 'timeout', 'ok', 'timeout']);
    await Promise.all(envs.map((env) => env.close!()));
  });

  test('a loop in reset() and a crashed worker end that episode only', async () => {
    const looping = await made('loop-reset');
    expect((await envError(looping.reset({ seed: 13 }))).message).toContain(`reset() did not finish within ${LIMIT} ms`);
    expect((await looping.reset({ seed: 14 })).observation).toBe('start 14');

    const crashing = await made('crash');
    await crashing.reset({ seed: 1 });
    await crashing.step('up');
    const error = await envError(crashing.step('up'));
    expect(error.kind).toBe('crashed');
    expect(error.message).toContain("step() failed at step 2: the environment's worker stopped (uncaught Error: a timer blew up)");
    await crashing.reset({ seed: 2 });
    expect((await crashing.step('up')).observation).toBe('step 1');
    await Promise.all([looping.close!(), crashing.close!()]);
  });

  test('ArrayBuffers count toward the memory limit: a worker that keeps 1 MiB a step is stopped near it', async () => {
    const hoarding = await loadEnvFile(fixture('hoards-memory.js'), { maxMemoryMb: 64 });
    const env = await hoarding.make();
    await env.reset({ seed: 1 });
    const rssBefore = process.memoryUsage.rss();
    let steps = 0;
    const error = await envError(async () => {
      while (steps < 400) {
        await env.step('keep');
        steps++;
      }
    });
    expect(error.kind).toBe('crashed');
    expect(error.step).toBeGreaterThan(40);
    expect(error.step).toBeLessThanOrEqual(64);
    expect(error.message).toMatch(/step\(\) failed at step \d+: the environment's worker stopped \(it held 6[45](\.\d)? MiB after the call, over its memory limit of 64 MiB \(maxMemoryMb, --max-memory-mb\), which counts its heap, ArrayBuffers and WebAssembly memory\)/);
    expect(process.memoryUsage.rss() - rssBefore).toBeLessThan(150 * 1024 * 1024);
    // The next episode runs on a fresh worker with nothing kept.
    await env.reset({ seed: 2 });
    expect((await env.step('keep')).observation).toBe('holding 1 MiB');
    // Dead ArrayBuffers do not count: 8 MiB dropped at every step beside 40 MiB kept never stop it.
    const dropping = await hoarding.make({ keep: false });
    await dropping.reset({ seed: 3 });
    for (let t = 0; t < 100; t++) await dropping.step('drop');
    await Promise.all([env.close!(), dropping.close!()]);
    await hoarding.dispose();
  });

  test("the scripted expert runs in the worker, guarded like step(): its answer, a throw, a wrong type and a loop", async () => {
    const fine = await made('none');
    await fine.reset({ seed: 1 });
    expect(await fine.expertAction!()).toBe('up');
    const cases: [string, string, string][] = [
      ['expert-throw', 'threw', 'expertAction() threw before step 2: Error: the expert lost count'],
      ['expert-number', 'malformed', 'expertAction() returned 7 before step 2; it must return an action string'],
      ['expert-loop', 'timeout', `expertAction() did not finish within ${LIMIT} ms before step 2; its worker was stopped`],
    ];
    for (const [fault, kind, message] of cases) {
      const env = await made(fault);
      await env.reset({ seed: 1 });
      await env.step(await env.expertAction!());
      const error = await envError(env.expertAction!());
      expect(error.message, fault).toContain(message);
      expect([error.kind, error.method, error.step], fault).toEqual([kind, 'expertAction', 2]);
      await env.close!();
    }
    // The docs' example has an expert that wins every episode, choosing among the listed actions.
    const wordGuess = await loadEnvFile(fixture('word-guess.js'));
    const env = await wordGuess.make();
    for (const seed of [1, 2, 3]) {
      await env.reset({ seed });
      let result: StepResult;
      do {
        const action = await env.expertAction!();
        expect(await env.validActions!()).toContain(action);
        result = await env.step(action);
      } while (!result.terminated && !result.truncated);
      expect(result.info.success).toBe(true);
    }
    await Promise.all([fine.close!(), env.close!()]);
    await wordGuess.dispose();
  });

  test('files that do not load give an EnvError naming the file and the fix', async () => {
    const cases: [string, RegExp][] = [
      ['syntax-error.js', /^environment .*syntax-error\.js: has a syntax error at .*syntax-error\.js:6:39: Unexpected token ';'\. Fix: correct the syntax/],
      ['missing.js', /^environment .*missing\.js: file not found \(looked for .*missing\.js\)\. Fix: check the path/],
      ['no-default-export.js', /has no default export \(it exports `environment`\)\. Fix: make it the default export: `export default environment;`/],
      ['bad-shape.js', /the default export is not a valid environment module: id "Bad Id" \(a string\) \(the id must be a string matching \[a-z\]\[a-z0-9-\]\*\); no maxEpisodeSteps .*; make "not a function"/],
      ['.', /is a directory, not a module file/],
      ['../../../README.md', /has the extension "\.md"; an environment file is a JavaScript module\. Fix: save it as \.js or \.mjs/],
    ];
    for (const [name, message] of cases) {
      const error = await envError(loadEnvFile(fixture(name)));
      expect(error.message, name).toMatch(message);
      expect(error.method).toBe('load');
    }
    const started = performance.now();
    const error = await envError(loadEnvFile(fixture('top-level-loop.js'), { loadTimeoutMs: LIMIT }));
    expect(performance.now() - started).toBeLessThan(LIMIT + 2000);
    expect(error.message).toContain(`did not finish loading within ${LIMIT} ms; its worker was stopped`);
  });

  test('TypeScript files load too, and files outside a "type": "module" package', async () => {
    const typed = await loadEnvFile(fixture('typed-env.ts'), { stepTimeoutMs: 2000 });
    const env = await typed.make();
    expect(await env.reset({ seed: 4 })).toEqual({ observation: 'say even', info: {} });
    expect(await env.step('even')).toMatchObject({ reward: 1, info: { success: true } });
    await typed.dispose();

    const dir = await mkdtemp(join(tmpdir(), 'rlplay-env-'));
    try {
      const source = (await readFile(join(FIXTURES, 'typed-env.ts'), 'utf8')).replace(/^import type .*$/m, "type EnvModule = any; type StepResult = any;");
      await writeFile(join(dir, 'typed.ts'), source);
      await writeFile(join(dir, 'plain.js'), await readFile(join(FIXTURES, 'word-guess.js'), 'utf8'));
      await writeFile(join(dir, 'broken.js'), 'export default {\n  id: "x",,\n};\n');
      for (const [file, id] of [['typed.ts', 'typed-echo'], ['plain.js', 'word-guess']]) {
        const module = await loadEnvFile(join(dir, file));
        expect(module.id).toBe(id);
        const instance = await module.make();
        expect(typeof (await instance.reset({ seed: 1 })).observation).toBe('string');
        await module.dispose();
      }
      expect((await envError(loadEnvFile(join(dir, 'broken.js')))).message).toMatch(/has a syntax error at .*broken\.js:2:11: Unexpected token ','/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a disposed module refuses new instances', async () => {
    const module = await loadEnvFile(fixture('faulty.js'));
    await module.dispose();
    expect((await envError(module.make())).message).toContain('make() was called after the module was disposed');
  });
});

describe('resolveEnvironment', () => {
  test('a built-in id runs in-process behind the guard; a path loads the file into workers', async () => {
    const builtin = await resolveEnvironment('reasoning');
    expect([builtin.id, builtin.builtin, builtin.source]).toEqual(['reasoning', true, 'reasoning']);
    const env = await builtin.make();
    await env.reset({ seed: 1 });
    await expect(env.step('guess: 10')).resolves.toMatchObject({ terminated: expect.any(Boolean) });
    await builtin.dispose();

    const custom = await resolveEnvironment(`./${fixture('word-guess.js')}`, { stepTimeoutMs: 1000 });
    expect([custom.id, custom.builtin]).toEqual(['word-guess', false]);
    expect((await playEpisode(await custom.make(), 1, custom.maxEpisodeSteps)).results.length).toBeGreaterThan(0);
    await custom.dispose();
  });

  test('an unknown id lists the built-ins and how to name a file', async () => {
    const error = await envError(resolveEnvironment('my-env'));
    for (const id of BUILTIN_ENVIRONMENTS.keys()) expect(error.message).toContain(id);
    expect(error.message).toContain('a path must start with ./ or / or end in .js or .mjs');
    expect((await envError(resolveEnvironment('tool_use'))).message).toContain('did you mean "tool-use"?');
  });

  test('the CLI way (plain Node with tsx, as bin/rlplay.js runs) loads and guards a custom file', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['bin/run-ts.js', 'tests/support/env-custom-probe.ts', fixture('faulty.js')], { cwd: ROOT });
    expect(JSON.parse(stdout)).toEqual({ id: 'faulty', first: 'step 1', error: { kind: 'timeout', step: 2 }, afterReset: 'step 1' });
  });
});
