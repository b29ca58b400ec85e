// Parsers for command-line values, with messages that say what was expected.
import { InvalidArgumentError } from 'commander';

export function parseWholeNumber(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError(`expected a whole number, got "${value}"`);
  return n;
}

export function parseNumber(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`expected a number, got "${value}"`);
  return n;
}

export function parseIdList(value: string): number[] {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.some((p) => !/^\d+$/.test(p))) throw new InvalidArgumentError(`expected comma-separated token ids like 1,403,407, got "${value}"`);
  return parts.map(Number);
}
