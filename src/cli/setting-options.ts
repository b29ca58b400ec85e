// Command-line options made from a settings schema (src/common/settings.ts): each setting becomes
// `--kebab-name <value>` with its doc, its allowed values and its default in --help, and a value
// out of range is refused by commander with what is allowed.
import { InvalidArgumentError, Option, type Command } from 'commander';
import { describeAllowed, settingProblem, type Setting, type SettingsSchema } from '../common/settings.ts';
import { parseNumber } from './parse.ts';

const PLACEHOLDERS: Record<string, string> = { seconds: 's', ms: 'ms', MiB: 'mb' };

/** The option's flags for a setting: `maxSessions` → `--max-sessions <n>`, `idleTimeout` (seconds) → `--idle-timeout <s>`. */
export function settingFlags(name: string, setting: Setting): string {
  const kebab = name.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);
  const text = setting.type === 'string' || setting.type === 'strings';
  const placeholder = text ? setting.unit! : (PLACEHOLDERS[setting.unit ?? ''] ?? 'n');
  return `--${kebab} <${placeholder}>`;
}

/** Adds one option per setting of `schema`, in its order; the parsed values arrive under the settings' names. */
export function addSettingOptions(command: Command, schema: SettingsSchema): Command {
  for (const [name, setting] of Object.entries(schema)) {
    const text = setting.type === 'string' || setting.type === 'strings';
    const option = new Option(settingFlags(name, setting), text ? setting.doc : `${setting.doc.replace(/\.$/, '')} (${describeAllowed(setting)})`);
    if (setting.type === 'strings') {
      option.argParser((value: string, previous: string[] | undefined) => [...(previous ?? []), value]).default([], 'none');
    } else {
      option.argParser((value: string) => parseSetting(setting, value)).default(setting.default);
    }
    command.addOption(option);
  }
  return command;
}

function parseSetting(setting: Setting, text: string): unknown {
  const value = setting.type === 'integer' || setting.type === 'number' ? parseNumber(text) : text;
  if (settingProblem(setting, value) !== null) throw new InvalidArgumentError(`it must be ${describeAllowed(setting)}.`);
  return value;
}
