// Small helpers on token-id sequences, shared by the engine and the policies.

/** Whether `tokens` begins with `prefix`. */
export function startsWith(tokens: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > tokens.length) return false;
  for (let i = prefix.length - 1; i >= 0; i--) if (tokens[i] !== prefix[i]) return false;
  return true;
}

/**
 * Appends `items` to `target` in place. `target.push(...items)` passes every item as an argument
 * on the stack, and a long token list (a large observation or a long context) overflows it.
 */
export function append<T>(target: T[], items: readonly T[]): void {
  for (const item of items) target.push(item);
}
