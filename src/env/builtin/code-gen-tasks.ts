// code-gen's task families (the environment is code-gen.ts): for each, its difficulty, the signature
// of solve, seeded parameters and inputs, the reference behaviour and solution, and the plausible
// wrong solutions the candidate list draws from.

export type Rand = () => number;
export type Params = Record<string, number | string>;

export interface Family {
  id: string;
  difficulty: 1 | 2 | 3;
  /** Parameter names of solve. */
  signature: string;
  params(r: Rand): Params;
  describe(p: Params): string;
  /** Arguments of one call. */
  input(r: Rand, p: Params): unknown[];
  /** The reference behaviour, on the host. */
  reference(p: Params, ...args: any[]): unknown;
  /** The reference solution, as the expert writes it (it must agree with `reference`). */
  solution(p: Params): string;
  /** Plausible wrong solutions (off by one, wrong operator, a missed case). */
  wrong(p: Params): string[];
  /** A constant a lazy solution returns. */
  constant: string;
}

const int = (r: Rand, lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
export const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
const ints = (r: Rand, n: number, lo: number, hi: number) => Array.from({ length: n }, () => int(r, lo, hi));
const word = (r: Rand, alphabet: string, lo: number, hi: number) => Array.from({ length: int(r, lo, hi) }, () => alphabet[Math.floor(r() * alphabet.length)]).join('');

export const FAMILIES: Family[] = [
  // Difficulty 1: one-liners.
  {
    id: 'sum',
    difficulty: 1,
    signature: 'xs',
    params: (r) => ({ k: int(r, 1, 30) }),
    describe: (p) => `returns ${p.k} plus the sum of the numbers in the array \`xs\``,
    input: (r) => [ints(r, int(r, 0, 7), -20, 50)],
    reference: (p, xs: number[]) => xs.reduce((a, b) => a + b, Number(p.k)),
    solution: (p) => `function solve(xs) {\n  return xs.reduce((a, b) => a + b, ${p.k});\n}`,
    wrong: (p) => [
      `function solve(xs) {\n  let s = ${p.k};\n  for (let i = 1; i < xs.length; i++) s += xs[i];\n  return s;\n}`,
      `function solve(xs) {\n  return xs.reduce((a, b) => a * b, ${p.k});\n}`,
      `function solve(xs) {\n  return xs.reduce((a, b) => a + Math.abs(b), ${p.k});\n}`,
    ],
    constant: '0',
  },
  {
    id: 'max',
    difficulty: 1,
    signature: 'xs',
    params: (r) => ({ k: int(r, -20, 20) }),
    describe: (p) => `returns the largest of ${p.k} and the numbers in the array \`xs\``,
    input: (r, p) => [ints(r, int(r, 0, 6), Number(p.k) - 30, Number(p.k) + 10)],
    reference: (p, xs: number[]) => Math.max(Number(p.k), ...xs),
    solution: (p) => `function solve(xs) {\n  return Math.max(${p.k}, ...xs);\n}`,
    wrong: (p) => [
      `function solve(xs) {\n  return Math.min(${p.k}, ...xs);\n}`,
      'function solve(xs) {\n  return Math.max(...xs);\n}',
      `function solve(xs) {\n  return xs.length > 0 ? xs[xs.length - 1] : ${p.k};\n}`,
    ],
    constant: '0',
  },
  {
    id: 'reverse',
    difficulty: 1,
    signature: 's',
    params: (r) => ({ k: int(r, 2, 5) }),
    describe: (p) => `returns the string \`s\` reversed, repeated ${p.k} times`,
    input: (r) => [word(r, 'abcdefghijklmnopqrstuvwxyz', 0, 6)],
    reference: (p, s: string) => [...s].reverse().join('').repeat(Number(p.k)),
    solution: (p) => `function solve(s) {\n  return s.split('').reverse().join('').repeat(${p.k});\n}`,
    wrong: (p) => [
      `function solve(s) {\n  return s.split('').reverse().join(' ').repeat(${p.k});\n}`,
      `function solve(s) {\n  return s.repeat(${p.k});\n}`,
      `function solve(s) {\n  return s.slice(1).split('').reverse().join('').repeat(${p.k});\n}`,
    ],
    constant: "''",
  },
  {
    id: 'count-greater',
    difficulty: 1,
    signature: 'xs',
    params: (r) => ({ k: int(r, -5, 15) }),
    describe: (p) => `returns how many numbers in the array \`xs\` are greater than ${p.k}`,
    input: (r, p) => [ints(r, int(r, 0, 8), Number(p.k) - 8, Number(p.k) + 8)],
    reference: (p, xs: number[]) => xs.filter((x) => x > Number(p.k)).length,
    solution: (p) => `function solve(xs) {\n  return xs.filter((x) => x > ${p.k}).length;\n}`,
    wrong: (p) => [
      `function solve(xs) {\n  return xs.filter((x) => x >= ${p.k}).length;\n}`,
      `function solve(xs) {\n  return xs.filter((x) => x < ${p.k}).length;\n}`,
      `function solve(xs) {\n  return xs.filter((x) => x > ${p.k}).length - 1;\n}`,
    ],
    constant: '0',
  },
  {
    id: 'scale',
    difficulty: 1,
    signature: 'xs',
    params: (r) => ({ k: int(r, 2, 9) }),
    describe: (p) => `returns a new array with every number of \`xs\` multiplied by ${p.k}`,
    input: (r) => [ints(r, int(r, 0, 6), -10, 20)],
    reference: (p, xs: number[]) => xs.map((x) => x * Number(p.k)),
    solution: (p) => `function solve(xs) {\n  return xs.map((x) => x * ${p.k});\n}`,
    wrong: (p) => [
      `function solve(xs) {\n  return xs.map((x) => x + ${p.k});\n}`,
      `function solve(xs) {\n  return xs.map((x) => x * ${Number(p.k) + 1});\n}`,
      `function solve(xs) {\n  return xs.slice(1).map((x) => x * ${p.k});\n}`,
    ],
    constant: '[]',
  },

  // Difficulty 2: small loops and string processing.
  {
    id: 'count-vowels',
    difficulty: 2,
    signature: 's',
    params: () => ({}),
    describe: () => 'returns how many vowels (a, e, i, o, u, upper or lower case) the string `s` contains',
    input: (r) => [word(r, 'abcdeEfghiIjklmnoOpqrstuUvwxyz  AB', 0, 14)],
    reference: (_p, s: string) => [...s].filter((c) => 'aeiouAEIOU'.includes(c)).length,
    solution: () => "function solve(s) {\n  let count = 0;\n  for (const c of s.toLowerCase()) if ('aeiou'.includes(c)) count++;\n  return count;\n}",
    wrong: () => [
      "function solve(s) {\n  let count = 0;\n  for (const c of s) if ('aeiou'.includes(c)) count++;\n  return count;\n}",
      "function solve(s) {\n  let count = 0;\n  for (const c of s.toLowerCase()) if ('aeiouy'.includes(c)) count++;\n  return count;\n}",
      "function solve(s) {\n  let count = 0;\n  for (const c of s.toLowerCase()) if (!'aeiou'.includes(c)) count++;\n  return count;\n}",
    ],
    constant: '0',
  },
  {
    id: 'fizzbuzz',
    difficulty: 2,
    signature: 'n',
    params: (r) => {
      const a = pick(r, [2, 3, 4, 5]);
      const b = pick(r, [3, 5, 6, 7].filter((x) => x !== a && x % a !== 0));
      const [fizz, buzz] = pick(r, [['Fizz', 'Buzz'], ['Foo', 'Bar'], ['Ping', 'Pong'], ['Zip', 'Zap']]);
      return { a, b, fizz, buzz };
    },
    describe: (p) =>
      `returns an array of the numbers 1 to \`n\`, except that multiples of ${p.a} become "${p.fizz}", multiples of ${p.b} become "${p.buzz}", and multiples of both become "${p.fizz}${p.buzz}"`,
    input: (r) => [int(r, 1, 24)],
    reference: (p, n: number) =>
      Array.from({ length: n }, (_, i) => {
        const x = i + 1;
        const s = (x % Number(p.a) === 0 ? String(p.fizz) : '') + (x % Number(p.b) === 0 ? String(p.buzz) : '');
        return s === '' ? x : s;
      }),
    solution: (p) =>
      `function solve(n) {\n  const out = [];\n  for (let i = 1; i <= n; i++) {\n    let s = '';\n    if (i % ${p.a} === 0) s += '${p.fizz}';\n    if (i % ${p.b} === 0) s += '${p.buzz}';\n    out.push(s === '' ? i : s);\n  }\n  return out;\n}`,
    wrong: (p) => [
      `function solve(n) {\n  const out = [];\n  for (let i = 1; i < n; i++) {\n    let s = '';\n    if (i % ${p.a} === 0) s += '${p.fizz}';\n    if (i % ${p.b} === 0) s += '${p.buzz}';\n    out.push(s === '' ? i : s);\n  }\n  return out;\n}`,
      `function solve(n) {\n  const out = [];\n  for (let i = 1; i <= n; i++) {\n    if (i % ${p.a} === 0) out.push('${p.fizz}');\n    else if (i % ${p.b} === 0) out.push('${p.buzz}');\n    else out.push(i);\n  }\n  return out;\n}`,
      `function solve(n) {\n  const out = [];\n  for (let i = 1; i <= n; i++) {\n    let s = '';\n    if (i % ${p.a} === 0) s += '${p.fizz}';\n    if (i % ${p.b} === 0) s += '${p.buzz}';\n    out.push(s === '' ? String(i) : s);\n  }\n  return out;\n}`,
    ],
    constant: '[]',
  },
  {
    id: 'dedupe',
    difficulty: 2,
    signature: 'xs',
    params: () => ({}),
    describe: () => 'returns the numbers of `xs` without duplicates, keeping the first occurrence of each, in order',
    input: (r) => [ints(r, int(r, 0, 10), 0, 6)],
    reference: (_p, xs: number[]) => [...new Set(xs)],
    solution: () => 'function solve(xs) {\n  const seen = new Set();\n  const out = [];\n  for (const x of xs) {\n    if (!seen.has(x)) {\n      seen.add(x);\n      out.push(x);\n    }\n  }\n  return out;\n}',
    wrong: () => [
      'function solve(xs) {\n  return [...new Set(xs)].sort((a, b) => a - b);\n}',
      'function solve(xs) {\n  return xs.filter((x, i) => xs.lastIndexOf(x) === i);\n}',
      'function solve(xs) {\n  return xs.filter((x, i) => i === 0 || x !== xs[i - 1]);\n}',
    ],
    constant: '[]',
  },
  {
    id: 'digit-sum',
    difficulty: 2,
    signature: 'n',
    params: () => ({}),
    describe: () => 'returns the sum of the decimal digits of the non-negative integer `n`',
    input: (r) => [pick(r, [int(r, 0, 9), int(r, 10, 999), int(r, 1000, 999999)])],
    reference: (_p, n: number) => [...String(n)].reduce((a, c) => a + Number(c), 0),
    solution: () => 'function solve(n) {\n  let sum = 0;\n  while (n > 0) {\n    sum += n % 10;\n    n = Math.floor(n / 10);\n  }\n  return sum;\n}',
    wrong: () => [
      'function solve(n) {\n  let sum = 0;\n  while (n > 9) {\n    sum += n % 10;\n    n = Math.floor(n / 10);\n  }\n  return sum;\n}',
      'function solve(n) {\n  return String(n).length;\n}',
      'function solve(n) {\n  let sum = 0;\n  while (n > 0) {\n    sum += n % 10;\n    n = n / 10;\n  }\n  return sum;\n}',
    ],
    constant: '0',
  },
  {
    id: 'running-sum',
    difficulty: 2,
    signature: 'xs',
    params: () => ({}),
    describe: () => 'returns the running sums of `xs`: element i of the result is xs[0] + ... + xs[i]',
    input: (r) => [ints(r, int(r, 0, 7), -9, 20)],
    reference: (_p, xs: number[]) => {
      let s = 0;
      return xs.map((x) => (s += x));
    },
    solution: () => 'function solve(xs) {\n  const out = [];\n  let total = 0;\n  for (const x of xs) {\n    total += x;\n    out.push(total);\n  }\n  return out;\n}',
    wrong: () => [
      'function solve(xs) {\n  const out = [];\n  let total = 0;\n  for (const x of xs) {\n    out.push(total);\n    total += x;\n  }\n  return out;\n}',
      'function solve(xs) {\n  return xs.map((x, i) => (i === 0 ? x : x + xs[i - 1]));\n}',
      'function solve(xs) {\n  const total = xs.reduce((a, b) => a + b, 0);\n  return xs.map(() => total);\n}',
    ],
    constant: '[]',
  },

  // Difficulty 3: a bit more.
  {
    id: 'run-length',
    difficulty: 3,
    signature: 's',
    params: () => ({}),
    describe: () => 'returns the run-length encoding of the string `s`: each run of equal characters becomes the character followed by the run length ("aaabcc" → "a3b1c2"; "" → "")',
    input: (r) => [Array.from({ length: int(r, 0, 5) }, () => pick(r, [...'abcxyz']).repeat(int(r, 1, 4))).join('')],
    reference: (_p, s: string) => (s.match(/(.)\1*/g) ?? []).map((run) => run[0] + run.length).join(''),
    solution: () =>
      "function solve(s) {\n  let out = '';\n  let i = 0;\n  while (i < s.length) {\n    let j = i;\n    while (j < s.length && s[j] === s[i]) j++;\n    out += s[i] + (j - i);\n    i = j;\n  }\n  return out;\n}",
    wrong: () => [
      "function solve(s) {\n  let out = '';\n  let i = 0;\n  while (i < s.length) {\n    let j = i;\n    while (j < s.length && s[j] === s[i]) j++;\n    out += s[i] + (j - i > 1 ? j - i : '');\n    i = j;\n  }\n  return out;\n}",
      "function solve(s) {\n  const counts = {};\n  for (const c of s) counts[c] = (counts[c] || 0) + 1;\n  return Object.keys(counts).map((c) => c + counts[c]).join('');\n}",
      "function solve(s) {\n  let out = '';\n  let i = 0;\n  while (i < s.length) {\n    let j = i + 1;\n    while (j < s.length && s[j] === s[i]) j++;\n    out += s[i] + (j - i - 1);\n    i = j;\n  }\n  return out;\n}",
    ],
    constant: "''",
  },
  {
    id: 'balanced',
    difficulty: 3,
    signature: 's',
    params: () => ({}),
    describe: () => 'returns true if the brackets ( ) [ ] { } in the string `s` are balanced and properly nested, false otherwise',
    input: (r) => {
      // Half balanced strings (built by nesting), half perturbed ones.
      const build = (depth: number): string => {
        let s = '';
        const n = int(r, 0, 2);
        for (let i = 0; i < n; i++) {
          const [open, close] = pick(r, ['()', '[]', '{}']);
          s += open + (depth > 0 ? build(depth - 1) : '') + close;
        }
        return s;
      };
      let s = build(2);
      if (r() < 0.5 && s.length > 0) {
        const i = int(r, 0, s.length - 1);
        s = r() < 0.5 ? s.slice(0, i) + s.slice(i + 1) : s.slice(0, i) + pick(r, [')', ']', '}', '(']) + s.slice(i + 1);
      }
      return [s];
    },
    reference: (_p, s: string) => {
      const stack: string[] = [];
      const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
      for (const c of s) {
        if ('([{'.includes(c)) stack.push(c);
        else if (c in pairs && stack.pop() !== pairs[c]) return false;
      }
      return stack.length === 0;
    },
    solution: () =>
      "function solve(s) {\n  const stack = [];\n  const pairs = { ')': '(', ']': '[', '}': '{' };\n  for (const c of s) {\n    if (c === '(' || c === '[' || c === '{') stack.push(c);\n    else if (c in pairs && stack.pop() !== pairs[c]) return false;\n  }\n  return stack.length === 0;\n}",
    wrong: () => [
      "function solve(s) {\n  let depth = 0;\n  for (const c of s) {\n    if ('([{'.includes(c)) depth++;\n    else if (')]}'.includes(c)) depth--;\n    if (depth < 0) return false;\n  }\n  return depth === 0;\n}",
      "function solve(s) {\n  const stack = [];\n  const pairs = { ')': '(', ']': '[', '}': '{' };\n  for (const c of s) {\n    if (c === '(' || c === '[' || c === '{') stack.push(c);\n    else if (c in pairs && stack.pop() !== pairs[c]) return false;\n  }\n  return true;\n}",
      'function solve(s) {\n  return s.length % 2 === 0;\n}',
    ],
    constant: 'true',
  },
  {
    id: 'roman',
    difficulty: 3,
    signature: 'n',
    params: () => ({}),
    describe: () => 'returns the integer `n` (1 to 3999) in Roman numerals, with subtractive forms (4 → "IV", 9 → "IX", 40 → "XL", 1994 → "MCMXCIV")',
    input: (r) => [pick(r, [int(r, 1, 20), int(r, 21, 400), int(r, 401, 3999)])],
    reference: (_p, n: number) => {
      let out = '';
      for (const [v, s] of ROMAN) while (n >= v) (out += s), (n -= v);
      return out;
    },
    solution: () =>
      "function solve(n) {\n  const table = [[1000, 'M'], [900, 'CM'], [500, 'D'], [400, 'CD'], [100, 'C'], [90, 'XC'],\n    [50, 'L'], [40, 'XL'], [10, 'X'], [9, 'IX'], [5, 'V'], [4, 'IV'], [1, 'I']];\n  let out = '';\n  for (const [value, symbol] of table) {\n    while (n >= value) {\n      out += symbol;\n      n -= value;\n    }\n  }\n  return out;\n}",
    wrong: () => [
      "function solve(n) {\n  const table = [[1000, 'M'], [500, 'D'], [100, 'C'], [50, 'L'], [10, 'X'], [5, 'V'], [1, 'I']];\n  let out = '';\n  for (const [value, symbol] of table) {\n    while (n >= value) {\n      out += symbol;\n      n -= value;\n    }\n  }\n  return out;\n}",
      "function solve(n) {\n  const table = [[1000, 'M'], [900, 'CM'], [500, 'D'], [400, 'CD'], [100, 'C'], [90, 'XC'],\n    [50, 'L'], [40, 'XL'], [10, 'X'], [9, 'IX'], [5, 'V'], [4, 'IV'], [1, 'I']];\n  let out = '';\n  for (const [value, symbol] of table) {\n    if (n >= value) {\n      out += symbol;\n      n -= value;\n    }\n  }\n  return out;\n}",
      "function solve(n) {\n  const table = [[1000, 'M'], [900, 'CM'], [500, 'D'], [400, 'CD'], [100, 'C'], [90, 'XC'],\n    [50, 'L'], [40, 'XL'], [10, 'X'], [9, 'VIIII'], [5, 'V'], [4, 'IIII'], [1, 'I']];\n  let out = '';\n  for (const [value, symbol] of table) {\n    while (n >= value) {\n      out += symbol;\n      n -= value;\n    }\n  }\n  return out;\n}",
    ],
    constant: "''",
  },
  {
    id: 'caesar',
    difficulty: 3,
    signature: 's',
    params: (r) => ({ k: int(r, 1, 25) }),
    describe: (p) =>
      `returns the string \`s\` with every letter shifted ${p.k} places forward in the alphabet, wrapping from z to a (upper case stays upper case, lower case stays lower case, other characters are unchanged)`,
    input: (r) => [word(r, 'abcxyzAMZqr !,', 0, 12)],
    reference: (p, s: string) =>
      s.replace(/[a-z]/gi, (c) => {
        const base = c <= 'Z' ? 65 : 97;
        return String.fromCharCode(((c.charCodeAt(0) - base + Number(p.k)) % 26) + base);
      }),
    solution: (p) =>
      `function solve(s) {\n  let out = '';\n  for (const c of s) {\n    const code = c.charCodeAt(0);\n    if (code >= 65 && code <= 90) out += String.fromCharCode(((code - 65 + ${p.k}) % 26) + 65);\n    else if (code >= 97 && code <= 122) out += String.fromCharCode(((code - 97 + ${p.k}) % 26) + 97);\n    else out += c;\n  }\n  return out;\n}`,
    wrong: (p) => [
      `function solve(s) {\n  let out = '';\n  for (const c of s) out += String.fromCharCode(c.charCodeAt(0) + ${p.k});\n  return out;\n}`,
      `function solve(s) {\n  let out = '';\n  for (const c of s) {\n    const code = c.charCodeAt(0);\n    if (code >= 97 && code <= 122) out += String.fromCharCode(((code - 97 + ${p.k}) % 26) + 97);\n    else out += c;\n  }\n  return out;\n}`,
      `function solve(s) {\n  let out = '';\n  for (const c of s) {\n    const code = c.charCodeAt(0);\n    if (code >= 65 && code <= 90) out += String.fromCharCode(((code - 65 - ${p.k} + 26) % 26) + 65);\n    else if (code >= 97 && code <= 122) out += String.fromCharCode(((code - 97 - ${p.k} + 26) % 26) + 97);\n    else out += c;\n  }\n  return out;\n}`,
    ],
    constant: "''",
  },
];

const ROMAN: Array<[number, string]> = [
  [1000, 'M'], [900, 'CM'], [500, 'D'], [400, 'CD'], [100, 'C'], [90, 'XC'],
  [50, 'L'], [40, 'XL'], [10, 'X'], [9, 'IX'], [5, 'V'], [4, 'IV'], [1, 'I'],
];

/** The task families by id (for tests and documentation). */
export const CODE_GEN_FAMILIES: ReadonlyArray<Pick<Family, 'id' | 'difficulty'>> = FAMILIES;
