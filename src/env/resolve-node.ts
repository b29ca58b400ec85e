// What `--env <spec>` names, in Node: a built-in environment by id, or a custom environment module
// by file path. Built-ins are ours and run in-process; custom files run in workers (load-node.ts).
// Both come back guarded (guard.ts): every result is validated and every call time-limited.
import { BUILTIN_ENVIRONMENTS } from './builtin/index.ts';
import { EnvError, guardEnvModule, resolveStepTimeout } from './guard.ts';
import { loadEnvFile, type LoadEnvFileOptions } from './load-node.ts';
import type { EnvModule } from './types.ts';

export type ResolveEnvironmentOptions = LoadEnvFileOptions;

export interface ResolvedEnvironment extends EnvModule {
  /** True for a built-in, false for a module loaded from a file. */
  readonly builtin: boolean;
  /** The built-in's id or the file path, as given. */
  readonly source: string;
  /** Releases the environment's workers (a no-op for built-ins). */
  dispose(): Promise<void>;
}

/** A spec names a file when it looks like a path: ./x, ../x, /x, or a module file name. */
export function looksLikeEnvPath(spec: string): boolean {
  return /^(\.{1,2}[\\/]|\/|~|[a-zA-Z]:[\\/]|file:)/.test(spec) || /\.[cm]?[jt]s$/i.test(spec);
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length];
}

/**
 * Resolves `--env <spec>`: a built-in id (see BUILTIN_ENVIRONMENTS), run in-process behind
 * guardEnvModule, or a path to an environment module file, loaded by loadEnvFile into workers.
 * Anything else is an EnvError listing the built-ins and how to name a file.
 */
export async function resolveEnvironment(spec: string, options: ResolveEnvironmentOptions = {}): Promise<ResolvedEnvironment> {
  resolveStepTimeout(options.stepTimeoutMs); // a bad limit fails here, whichever kind the spec names
  const builtin = BUILTIN_ENVIRONMENTS.get(spec);
  if (builtin) {
    return Object.assign(guardEnvModule(builtin, { stepTimeoutMs: options.stepTimeoutMs }), { builtin: true, source: spec, dispose: async () => {} });
  }
  if (looksLikeEnvPath(spec)) {
    const module = await loadEnvFile(spec, options);
    return Object.assign(module, { builtin: false });
  }
  const ids = [...BUILTIN_ENVIRONMENTS.keys()];
  const near = ids.filter((id) => editDistance(id, spec.toLowerCase()) <= 2);
  throw new EnvError({
    env: JSON.stringify(spec),
    method: 'load',
    kind: 'load',
    problem: `is neither a built-in environment${near.length > 0 ? ` (did you mean ${near.map((id) => `"${id}"`).join(' or ')}?)` : ''} nor a file path; the built-ins are ${ids.join(', ')}`,
    fix: 'name a built-in by its id, or a custom environment module by its path: a path must start with ./ or / or end in .js or .mjs (e.g. --env ./my-env.js)',
  });
}
