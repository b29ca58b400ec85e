// The docs' tables of settings are the settings schema's, row for row: docs/scale-out.md's options
// of rlplay serve are SERVE_SETTINGS (flag, default, allowed values, doc). On a mismatch the test
// prints the rows to paste.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { describeAllowed, type SettingsSchema } from '../../src/common/settings.ts';
import { settingFlags } from '../../src/cli/setting-options.ts';
import { SERVE_SETTINGS } from '../../src/serve/settings.ts';

const ROOT = join(import.meta.dirname, '../..');

function rows(schema: SettingsSchema): string[] {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  return Object.entries(schema).map(([name, setting]) => {
    const text = setting.type === 'string' || setting.type === 'strings';
    const shown = setting.type === 'strings' ? 'none' : String(setting.default);
    return `| \`${cell(settingFlags(name, setting))}\` | ${shown} | ${text ? '' : cell(describeAllowed(setting))} | ${cell(setting.doc)} |`;
  });
}

describe('settings tables in the docs', () => {
  test("docs/scale-out.md lists rlplay serve's options as SERVE_SETTINGS defines them", () => {
    const doc = readFileSync(join(ROOT, 'docs/scale-out.md'), 'utf8');
    const expected = rows(SERVE_SETTINGS).join('\n');
    expect(doc.includes(`\n${expected}\n`), `docs/scale-out.md should hold these rows, in this order:\n${expected}`).toBe(true);
  });
});
