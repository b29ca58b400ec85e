// The settings schema: one typed record per setting (its default, a one-line doc, its type, its
// range or choices, its unit), defined once, in the file of the algorithm or run that uses it. The
// defaults, the checks of `--set`, run.json and share links, `rlplay train --help` and the app's help
// all read it.

export type SettingType = 'integer' | 'number' | 'boolean' | 'enum';

export interface Setting<T = unknown> {
  type: SettingType;
  default: T;
  /** One line, for the user: what it does. */
  doc: string;
  /** Numbers: the least allowed value, itself allowed unless `exclusiveMin`. */
  min?: number;
  exclusiveMin?: boolean;
  /** Numbers: the greatest allowed value, itself allowed unless `exclusiveMax`. */
  max?: number;
  exclusiveMax?: boolean;
  /** Enums: the allowed values. */
  choices?: readonly string[];
  /** null is allowed, and means what `nullMeans` says. */
  nullMeans?: string;
  /** What the number counts or measures (episodes, updates...). */
  unit?: string;
}

export type SettingsSchema = Record<string, Setting>;

/** The settings' record type, e.g. `{ episodesPerUpdate: number; source: 'expert' | 'successes' }`. */
export type SettingsOf<S extends SettingsSchema> = { -readonly [K in keyof S]: S[K] extends Setting<infer T> ? T : never };

type Range = Pick<Setting, 'min' | 'exclusiveMin' | 'max' | 'exclusiveMax' | 'unit'>;

export function integerSetting(value: number, doc: string, range: Range = {}): Setting<number> {
  return { type: 'integer', default: value, doc, ...range };
}
export function numberSetting(value: number, doc: string, range: Range = {}): Setting<number> {
  return { type: 'number', default: value, doc, ...range };
}
/** A number that may also be null (off). */
export function optionalNumberSetting(value: number | null, doc: string, nullMeans: string, range: Range = {}): Setting<number | null> {
  return { type: 'number', default: value, doc, nullMeans, ...range };
}
export function booleanSetting(value: boolean, doc: string): Setting<boolean> {
  return { type: 'boolean', default: value, doc };
}
export function enumSetting<const C extends readonly string[]>(value: C[number], choices: C, doc: string): Setting<C[number]> {
  return { type: 'enum', default: value, doc, choices };
}

/** The settings every algorithm has; each passes its own default. */
export const learningRateSetting = (value: number) => numberSetting(value, 'AdamW step size of the LoRA weights.', { min: 0, exclusiveMin: true, max: 1 });
export const annealLearningRateSetting = (value: boolean) =>
  booleanSetting(value, 'Lower the step size linearly over the run, to almost 0 at its last update (big steps while it learns the format, small ones that keep what it learned).');
export const episodesPerUpdateSetting = (value: number) => integerSetting(value, 'Episodes played between two training updates.', { min: 1, unit: 'episodes' });
export const gammaSetting = (value: number) => numberSetting(value, 'Discount of future rewards per step (1: every step counts fully).', { min: 0, max: 1 });
export const normalizeAdvantagesSetting = (value: boolean) => booleanSetting(value, 'Scale advantages to mean 0, deviation 1 in each update.');
export const gaeLambdaSetting = (value: number) => numberSetting(value, 'GAE λ: 1 uses whole returns, lower leans on the value head.', { min: 0, max: 1 });
export const valueCoefSetting = (value: number) => numberSetting(value, 'Weight of the value loss against the policy loss.', { min: 0 });
export const entropyCoefSetting = (value: number) => numberSetting(value, 'Bonus for keeping the policy uncertain (more exploration).', { min: 0 });

export function defaultsOf<S extends SettingsSchema>(schema: S): SettingsOf<S> {
  return Object.fromEntries(Object.entries(schema).map(([name, setting]) => [name, setting.default])) as SettingsOf<S>;
}

/** The allowed values in words: "an integer ≥ 1", "a number > 0 and ≤ 1 (or null: never)", "one of expert, successes". */
export function describeAllowed(setting: Setting): string {
  let text: string;
  if (setting.type === 'boolean') text = 'true or false';
  else if (setting.type === 'enum') text = `one of ${setting.choices!.join(', ')}`;
  else {
    const bounds = [
      setting.min !== undefined ? `${setting.exclusiveMin ? '>' : '≥'} ${setting.min}` : '',
      setting.max !== undefined ? `${setting.exclusiveMax ? '<' : '≤'} ${setting.max}` : '',
    ].filter(Boolean);
    text = `${setting.type === 'integer' ? 'an integer' : 'a number'}${bounds.length ? ` ${bounds.join(' and ')}` : ''}`;
  }
  return setting.nullMeans ? `${text} (or null: ${setting.nullMeans})` : text;
}

/** The fix for a refused value: the nearest allowed one, e.g. "set episodesPerUpdate=1 or more". */
function fix(name: string, setting: Setting, value: unknown): string {
  if (setting.type === 'boolean') return `set ${name}=true or ${name}=false`;
  if (setting.type === 'enum') return `set ${name} to one of ${setting.choices!.map((choice) => `${name}=${choice}`).join(', ')}`;
  const { min, max } = setting;
  if (typeof value === 'number' && Number.isFinite(value)) {
    if (min !== undefined && (value < min || (value === min && setting.exclusiveMin))) return `set ${name}=${min}${setting.exclusiveMin ? ' or a little more' : ' or more'}`;
    if (max !== undefined && (value > max || (value === max && setting.exclusiveMax))) return `set ${name}=${max}${setting.exclusiveMax ? ' or a little less' : ' or less'}`;
    if (setting.type === 'integer') return `set a whole number, e.g. ${name}=${Math.round(value)}`;
  }
  return `set a number, e.g. ${name}=${JSON.stringify(setting.default ?? min ?? 1)}${setting.nullMeans ? `, or ${name}=null` : ''}`;
}

/** Why `value` is not allowed for `setting`, or null when it is. */
export function settingProblem(setting: Setting, value: unknown): string | null {
  if (value === null) return setting.nullMeans ? null : 'null is not allowed';
  switch (setting.type) {
    case 'boolean':
      return typeof value === 'boolean' ? null : 'not a boolean';
    case 'enum':
      return typeof value === 'string' && setting.choices!.includes(value) ? null : 'not one of the choices';
    case 'integer':
    case 'number': {
      if (typeof value !== 'number' || !Number.isFinite(value)) return 'not a finite number';
      if (setting.type === 'integer' && !Number.isSafeInteger(value)) return 'not an integer';
      const { min, max } = setting;
      if (min !== undefined && (value < min || (value === min && setting.exclusiveMin))) return 'too small';
      if (max !== undefined && (value > max || (value === max && setting.exclusiveMax))) return 'too large';
      return null;
    }
  }
}

/** A refused setting: which one, the value, what is allowed and the fix, in the message. */
export class SettingError extends RangeError {
  override name = 'SettingError';
}

/**
 * Checks overrides of `schema` (named `owner` in messages, e.g. "reinforce"): an unknown name is
 * refused with the closest valid one, a value of the wrong type or out of range with the range and
 * the fix, e.g. "reinforce setting episodesPerUpdate must be an integer ≥ 1 (got 0): set episodesPerUpdate=1 or more".
 */
export function checkSettings(owner: string, schema: SettingsSchema, overrides: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(overrides)) {
    const setting = Object.hasOwn(schema, name) ? schema[name] : undefined;
    if (!setting) {
      const closest = closestName(name, Object.keys(schema));
      throw new SettingError(`${owner} has no setting ${JSON.stringify(name)}${closest ? `; did you mean ${closest}?` : ''} (its settings: ${Object.keys(schema).join(', ')})`);
    }
    if (settingProblem(setting, value) !== null) {
      throw new SettingError(`${owner} setting ${name} must be ${describeAllowed(setting)} (got ${JSON.stringify(value) ?? String(value)}): ${fix(name, setting, value)}`);
    }
  }
}

/**
 * The name of `names` nearest to `name`, if it is near enough to be a typo: one that begins with it
 * or it begins with (klCoef, klCoefficient), else the nearest by edit distance (ignoring case and _).
 */
export function closestName(name: string, names: readonly string[]): string | undefined {
  const plain = (text: string) => text.toLowerCase().replaceAll('_', '');
  const wanted = plain(name);
  const prefixed = names.find((candidate) => plain(candidate).startsWith(wanted) || wanted.startsWith(plain(candidate)));
  if (prefixed && wanted.length >= 3) return prefixed;
  let best: { name: string; distance: number } | undefined;
  for (const candidate of names) {
    const distance = editDistance(wanted, plain(candidate));
    if (!best || distance < best.distance) best = { name: candidate, distance };
  }
  return best && best.distance <= Math.max(2, Math.floor(name.length / 3)) ? best.name : undefined;
}

/** Levenshtein distance (insertions, deletions and substitutions). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length];
}
