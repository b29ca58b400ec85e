// docs/scale-out.md's TRL recipe is excerpts of examples/trl/grpo_rlplay.py, a file kept runnable:
// every python block of the TRL section appears in it verbatim (dedented when it comes from inside
// the main block), and the file parses.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const EXAMPLE = join(ROOT, 'examples/trl/grpo_rlplay.py');
const doc = readFileSync(join(ROOT, 'docs/scale-out.md'), 'utf8');
const section = doc.slice(doc.indexOf('## Train with TRL\n'), doc.indexOf('\n## ', doc.indexOf('## Train with TRL\n') + 1));
const blocks = [...section.matchAll(/```python\n([\s\S]*?)```/g)].map((match) => match[1]);

/** Whether `block` is a run of whole lines of `file`, every line with the same extra indentation. */
function isExcerpt(block: string, file: string): boolean {
  const lines = block.replace(/\n$/, '').split('\n');
  for (const indent of ['', '    ', '        ']) {
    const indented = lines.map((line) => (line === '' ? '' : indent + line)).join('\n');
    if (`\n${file}\n`.includes(`\n${indented}\n`)) return true;
  }
  return false;
}

let python: string | null = null;
try {
  execFileSync('python3', ['--version']);
  python = 'python3';
} catch {}

describe("docs/scale-out.md's TRL recipe", () => {
  test('every python block of the TRL section is an excerpt of examples/trl/grpo_rlplay.py', () => {
    const file = readFileSync(EXAMPLE, 'utf8');
    expect(blocks.length).toBeGreaterThanOrEqual(4);
    for (const block of blocks) expect(isExcerpt(block, file), block).toBe(true);
  });

  test.skipIf(python === null)('examples/trl/grpo_rlplay.py parses (skipped: no python3 on this machine)', () => {
    execFileSync(python!, ['-c', 'import ast,sys; ast.parse(open(sys.argv[1]).read())', EXAMPLE]);
  });
});
