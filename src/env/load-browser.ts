// Custom environments in the browser: source text (from the editor, a file picker or a shared link
// the user has agreed to run) is evaluated as an ES module inside a module Web Worker
// (workers/env-host.js), so a call that loops forever is stopped by terminating the worker, and
// the page stays responsive whatever the environment does.
import { loadWorkerEnvModule, type WorkerEnvModule, type WorkerEnvOptions, type WorkerHandle } from './worker-env.ts';

export type { WorkerEnvModule } from './worker-env.ts';

export interface LoadEnvSourceOptions extends WorkerEnvOptions {
  /** How errors name the source before its id is known, e.g. the file name. Default 'custom environment'. */
  label?: string;
}

function browserWorker(): WorkerHandle {
  // Vite bundles the worker from this exact `new Worker(new URL(...), { type: 'module' })` form.
  const worker = new Worker(new URL('../../workers/env-host.js', import.meta.url), { type: 'module', name: 'rlplay-env' });
  return {
    endpoint: worker,
    terminate: () => worker.terminate(),
    onDeath(listener) {
      // In a browser an uncaught error does not end a worker; rlplay ends it, as Node would, so an
      // environment in an unknown state never serves another call.
      worker.addEventListener('error', (event) => {
        event.preventDefault();
        listener(event.message ? `uncaught ${event.message}` : 'the worker failed (it may not have started)');
      });
    },
  };
}

/**
 * Loads a custom environment from its source text: an ES module whose default export is
 * `{ id, description, maxEpisodeSteps, make }`. It runs in module Web Workers, one per Env
 * instance; calls are validated and limited to `stepTimeoutMs` (default 5000). A syntax error, no
 * default export or a wrong shape rejects with an EnvError. Call dispose() to end its workers.
 */
export function loadEnvSource(sourceText: string, options: LoadEnvSourceOptions = {}): Promise<WorkerEnvModule> {
  return loadWorkerEnvModule(browserWorker, { text: sourceText, label: options.label ?? 'custom environment' }, options);
}
