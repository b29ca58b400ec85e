// Small helpers on token-id sequences, shared by the engine and the policies.

/** Whether `tokens` begins with `prefix`. */
export function startsWith(tokens: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > tokens.length) return false;
  for (let i = prefix.length - 1; i >= 0; i--) if (tokens[i] !== prefix[i]) return false;
  return true;
}
