// The Train card's help and choices for each algorithm setting, read from the settings schema
// (src/rl/settings.ts, each algorithm's *_SETTINGS): a setting's name has one meaning, and one doc,
// in every algorithm that has it.
import { ALGORITHM_SETTINGS } from '../rl/index.ts';

const settings = Object.values(ALGORITHM_SETTINGS).flatMap((schema) => Object.entries(schema));

/** One line on each setting, shown beside its field. */
export const SETTING_HELP: Record<string, string> = Object.fromEntries(settings.map(([name, setting]) => [name, setting.doc]));

/** The choices of a string setting. */
export const SETTING_CHOICES: Record<string, readonly string[]> = Object.fromEntries(settings.flatMap(([name, setting]) => (setting.choices ? [[name, setting.choices]] : [])));
