// The settings several algorithms share, each with the algorithm's own default (the schema's
// machinery is src/common/settings.ts).
import { booleanSetting, integerSetting, numberSetting } from '../common/settings.ts';

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
export const klCoefSetting = (value: number) =>
  numberSetting(value, 'Penalty β for drifting from the base model, on the k3 estimate of the KL (0: none, and the base model is not scored); where β starts when it adapts.', { min: 0 });
