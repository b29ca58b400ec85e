// Learning-rate schedules as pure functions of the optimiser step.
//
// Steps are 1-based: step t is the t-th parameter update (the same t as AdamW's bias correction).
// Warm-up rises linearly to `lr`, reaching it at step warmupSteps (step 1 already gets lr / warmupSteps,
// not 0). The decay that follows uses progress p = (t - warmupSteps - 1) / (totalSteps - warmupSteps),
// capped at 1: the first step after warm-up runs at the full rate, and from step totalSteps + 1 on the
// rate stays at its floor. With step = current_step + 1 this is the decay of transformers'
// get_linear_schedule_with_warmup / get_cosine_with_min_lr_schedule_with_warmup.

export type LrSchedule =
  | { kind: 'constant'; lr: number }
  | { kind: 'warmup-constant'; lr: number; warmupSteps: number }
  | {
      kind: 'warmup-cosine';
      lr: number;
      warmupSteps: number;
      totalSteps: number;
      /** Floor of the decay as a fraction of lr, in [0, 1]; default 0. */
      minLrRatio?: number;
    }
  | {
      kind: 'linear-decay';
      lr: number;
      totalSteps: number;
      /** Default 0: decay from the first step. */
      warmupSteps?: number;
      /** Floor of the decay as a fraction of lr, in [0, 1]; default 0. */
      minLrRatio?: number;
    };

export type LrScheduleKind = LrSchedule['kind'];

const KINDS: readonly LrScheduleKind[] = ['constant', 'warmup-constant', 'warmup-cosine', 'linear-decay'];

/** Throws a RangeError that names the schedule and the offending field unless `schedule` is usable. */
export function validateLrSchedule(schedule: LrSchedule): void {
  const kind = (schedule as { kind?: unknown } | null)?.kind;
  if (!KINDS.includes(kind as LrScheduleKind)) {
    throw new RangeError(`Unknown learning-rate schedule kind ${JSON.stringify(kind)}; expected one of ${KINDS.join(', ')}`);
  }
  const where = `Learning-rate schedule '${schedule.kind}'`;
  if (!(Number.isFinite(schedule.lr) && schedule.lr >= 0)) throw new RangeError(`${where}: lr must be a finite number >= 0, got ${schedule.lr}`);
  if (schedule.kind === 'constant') return;
  const warmupSteps = schedule.warmupSteps ?? 0;
  if (!(Number.isInteger(warmupSteps) && warmupSteps >= 0)) throw new RangeError(`${where}: warmupSteps must be an integer >= 0, got ${warmupSteps}`);
  if (schedule.kind === 'warmup-constant') return;
  if (!(Number.isInteger(schedule.totalSteps) && schedule.totalSteps > warmupSteps)) {
    throw new RangeError(`${where}: totalSteps must be an integer greater than warmupSteps (${warmupSteps}), got ${schedule.totalSteps}`);
  }
  const minLrRatio = schedule.minLrRatio ?? 0;
  if (!(minLrRatio >= 0 && minLrRatio <= 1)) throw new RangeError(`${where}: minLrRatio must be in [0, 1], got ${minLrRatio}`);
}

/** The learning rate of the step-th update (1-based) under `schedule`. */
export function learningRate(step: number, schedule: LrSchedule): number {
  if (!(Number.isInteger(step) && step >= 1)) throw new RangeError(`learningRate: step must be an integer >= 1, got ${step}`);
  validateLrSchedule(schedule);
  if (schedule.kind === 'constant') return schedule.lr;
  const warmupSteps = schedule.warmupSteps ?? 0;
  if (step <= warmupSteps) return (schedule.lr * step) / warmupSteps;
  if (schedule.kind === 'warmup-constant') return schedule.lr;
  const progress = Math.min(1, (step - warmupSteps - 1) / (schedule.totalSteps - warmupSteps));
  const decay = schedule.kind === 'warmup-cosine' ? 0.5 * (1 + Math.cos(Math.PI * progress)) : 1 - progress;
  const floor = schedule.minLrRatio ?? 0;
  return schedule.lr * (floor + (1 - floor) * decay);
}
