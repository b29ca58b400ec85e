// One line on each algorithm setting, shown beside its field in the Train card. The settings and
// their defaults come from the algorithms themselves (src/rl/*.ts); this only explains them.
export const SETTING_HELP: Record<string, string> = {
  episodesPerUpdate: 'Episodes played between two training updates.',
  updateEpochs: 'Passes over the same episodes in each update.',
  numMinibatches: 'Pieces each pass is split into, one optimiser step each; each holds whole episodes.',
  gamma: 'Discount of future rewards per step (1: every step counts fully).',
  gaeLambda: 'GAE λ: 1 uses whole returns, lower leans on the value head.',
  clipCoef: 'How far one update may move an action’s probability ratio.',
  valueClip: 'How far one update may move the value estimate.',
  valueCoef: 'Weight of the value loss against the policy loss.',
  entropyCoef: 'Bonus for keeping the policy uncertain (more exploration).',
  klCoef: 'Penalty for drifting from the base model.',
  klCoefficient: 'Penalty for drifting from the base model.',
  klTarget: 'Adaptive KL: the coefficient is tuned to keep KL near this (empty: fixed).',
  targetKl: 'Stop an update’s passes early when KL to the old policy exceeds this.',
  normalizeAdvantages: 'Scale advantages to mean 0, deviation 1 in each update.',
  learningRate: 'AdamW step size of the LoRA weights.',
  annealLearningRate: 'Lower the step size linearly over the run, to almost 0 at its last update: big steps while it learns the format, small ones that keep what it learned later.',
  baselineDecay: 'How slowly the running-mean baseline follows new returns.',
  groupsPerUpdate: 'Groups played per update; each group shares one task.',
  groupSize: 'Attempts per group, compared with each other.',
  scaleByStd: 'Divide group advantages by their deviation (off: Dr. GRPO).',
  bufferSize: 'Transitions kept in the replay buffer.',
  batchSize: 'Transitions per gradient step.',
  gradientSteps: 'Gradient steps per update.',
  learningStarts: 'Transitions collected before learning starts.',
  targetUpdateInterval: 'Updates between copies of the Q network to its target.',
  epsilonStart: 'Share of random actions at the start.',
  epsilonEnd: 'Share of random actions after exploration.',
  explorationEpisodes: 'Episodes over which random actions fade out.',
  source: 'Imitate the scripted expert (every built-in has one; a custom environment needs expertAction()), or the run’s own successful episodes.',
};

/** The choices of a string setting. */
export const SETTING_CHOICES: Record<string, string[]> = {
  source: ['expert', 'successes'],
};
