// The public id of a built-in instance: the hash of what it is drawn from (environment, seed,
// split, difficulty), never of its content, so that no id can be worked back to an answer.

/** Eight hex digits of the 32-bit seed an instance is drawn from. */
export function instanceId(instanceSeed: number): string {
  return (instanceSeed >>> 0).toString(16).padStart(8, '0');
}
