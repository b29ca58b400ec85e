// Running the rlplay CLI (bin/rlplay.js) as a user would, in a child process.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';

export const CLI = join(import.meta.dirname, '../../bin/rlplay.js');

const run = promisify(execFile);

/** Runs `rlplay ...args` to its end: its exit code and output, whether it succeeded or not. */
export async function rlplay(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLI, ...args], { maxBuffer: 64 * 2 ** 20 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}
