// The settings schema: one typed record per setting (its default, a one-line doc, its type, its
// range or choices, its unit), defined once, in the file of the algorithm, run or command that uses
// it. The defaults, the checks of `--set`, run.json, share links and command-line options, the
// commands' --help, the app's help and the docs' tables all read it.

export type SettingType = 'integer' | 'number' | 'boolean' | 'enum' | 'string' | 'strings';

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
  /** What the number counts or measures (episodes, seconds...), or what the text names (address, origin). */
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
/** Free text, e.g. an address; `unit` names what it is. */
export function stringSetting(value: string, doc: string, unit: string): Setting<string> {
  return { type: 'string', default: value, doc, unit };
}
/** A list of texts, none by default: a command-line option given once per item. */
export function stringListSetting(doc: string, unit: string): Setting<string[]> {
  return { type: 'strings', default: [], doc, unit };
}
export function enumSetting<const C extends readonly string[]>(value: C[number], choices: C, doc: string): Setting<C[number]> {
  return { type: 'enum', default: value, doc, choices };
}

export function defaultsOf<S extends SettingsSchema>(schema: S): SettingsOf<S> {
  return Object.fromEntries(Object.entries(schema).map(([name, setting]) => [name, setting.default])) as SettingsOf<S>;
}

/** The allowed values in words: "an integer ≥ 1", "a number > 0 and ≤ 1 (or null: never)", "one of expert, successes". */
export function describeAllowed(setting: Setting): string {
  let text: string;
  if (setting.type === 'boolean') text = 'true or false';
  else if (setting.type === 'string') text = `a text (${setting.unit})`;
  else if (setting.type === 'strings') text = `a list of texts (${setting.unit})`;
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
  if (setting.type === 'string') return `set ${name} to a text, e.g. ${name}=${JSON.stringify(setting.default)}`;
  if (setting.type === 'strings') return `set ${name} to a list of texts, e.g. ${name}=[]`;
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
    case 'string':
      return typeof value === 'string' ? null : 'not a text';
    case 'strings':
      return Array.isArray(value) && value.every((item) => typeof item === 'string') ? null : 'not a list of texts';
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
 * or it begins with (kl, klCoef), else the nearest by edit distance (ignoring case and _).
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
