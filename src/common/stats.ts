// Summary statistics shared by training, evaluation and the app.

/** The arithmetic mean; NaN for an empty list (no data is not a mean of 0). */
export function mean(values: readonly number[]): number {
  return values.length ? values.reduce((sum, value) => sum + value, 0) / values.length : NaN;
}
