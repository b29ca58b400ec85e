// Robust parsing of free-text actions, shared by the built-in environments.
//
// Language models rarely write an action exactly as asked: they add capitals, quotes, markdown,
// trailing full stops, a second line of explanation, or a preamble ("I think the answer is 19").
// These helpers turn such text into something an environment can match, without ever throwing.
// Pure functions, no Node-only APIs (they run in the browser too).

/** Longest action text the helpers look at; anything beyond is ignored (agents can ramble). */
export const MAX_ACTION_CHARS = 2000;

/**
 * Lower-case, drop control characters, markdown bold (`**`, `__`) and backticks and surrounding quotes,
 * collapse whitespace, trim trailing punctuation. `"**Answer:  19.**"` → `answer: 19`.
 */
export function normalizeText(text: string): string {
  return String(text ?? '')
    .slice(0, MAX_ACTION_CHARS)
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, ' ') // control characters, keeping \t and \n
    .replace(/\*\*|__|`/g, '')
    .replace(/[\u2018\u2019\u201c\u201d]/g, '"')
    .toLowerCase()
    .replace(/\s+/g, ' ')
    .trim()
    .replace(/^["'\s]+|["'\s]+$/g, '')
    .replace(/[\s.!?;,]+$/, '');
}

/** The first line that has any content, or '' (agents often explain themselves on later lines). */
export function firstLine(text: string): string {
  for (const line of String(text ?? '').slice(0, MAX_ACTION_CHARS).split(/\r?\n/)) {
    if (normalizeText(line) !== '') return line;
  }
  return '';
}

/** The first number in the text (`-3`, `4.5`, `1,200`), or null. */
export function parseNumber(text: string): number | null {
  const match = /-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+/.exec(String(text ?? '').slice(0, MAX_ACTION_CHARS));
  if (!match) return null;
  const value = Number(match[0].replace(/,/g, ''));
  return Number.isFinite(value) ? value : null;
}

export interface Command {
  /** The canonical verb (the key of the `verbs` table). */
  verb: string;
  /** What follows the verb, after any `:`, `=`, ` - `, `is` or `of`, unnormalised apart from trimming. */
  argument: string;
}

/**
 * Finds `verb argument` in free text. `verbs` maps a canonical verb to the words that mean it,
 * e.g. `{ calc: ['calc', 'calculate', 'compute'] }`. The earliest verb word (a whole word) in the first
 * non-empty line wins; if that line has none, the whole text is searched. Accepts `Answer: 19`,
 * `answer 19.`, `I think the answer is 19`, `` `lookup: apple` ``. Returns null when no verb is found.
 */
export function parseCommand(text: string, verbs: Record<string, string[]>): Command | null {
  const words: Array<[string, string]> = [];
  for (const [verb, aliases] of Object.entries(verbs)) for (const alias of aliases) words.push([verb, alias.toLowerCase()]);
  // Longest aliases first, so "look up" beats "look" and "calculate" beats "calc".
  words.sort((a, b) => b[1].length - a[1].length);
  const pattern = new RegExp(`(?:^|[^a-z0-9])(${words.map(([, w]) => escapeRegExp(w).replace(/ /g, '\\s+')).join('|')})(?![a-z0-9])`, 'i');
  const clean = (s: string) => s.slice(0, MAX_ACTION_CHARS).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, ' ').replace(/\*\*|`/g, '');
  for (const source of [firstLine(text), String(text ?? '')]) {
    const line = clean(source);
    const match = pattern.exec(line);
    if (!match) continue;
    const word = match[1].toLowerCase().replace(/\s+/g, ' ');
    const verb = words.find(([, w]) => w === word)![0];
    let argument = line.slice(match.index + match[0].length).split(/\r?\n/)[0];
    argument = argument.replace(/^\s*(?:(?:[:=]|-(?=\s)|\bis\b|\bof\b)\s*)*/i, '').trim();
    argument = argument.replace(/^["']+|["']+$/g, '').replace(/[\s.!?;,"']+$/, '').trim();
    return { verb, argument };
  }
  return null;
}

/**
 * The valid action that the text means, or null: an exact match after normalisation, else the
 * only valid action that the first line contains (or is contained in). `"LOOKUP:  Apple."` matches
 * `lookup: apple`.
 */
export function matchAction(text: string, validActions: readonly string[]): string | null {
  const line = normalizeText(firstLine(text));
  if (line === '') return null;
  const squash = (s: string) => normalizeText(s).replace(/\s*([:=])\s*/g, '$1 ');
  const target = squash(line);
  const exact = validActions.find((a) => squash(a) === target);
  if (exact !== undefined) return exact;
  const containing = validActions.filter((a) => target.includes(squash(a)));
  return containing.length === 1 ? containing[0] : null;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
