// The page's side of the training Worker: one Worker per tab, started on first use.
import * as Comlink from 'comlink';
import type { TrainerApi, TrainerEvents } from './protocol.ts';

let trainer: Comlink.Remote<TrainerApi> | null = null;

export function trainerWorker(): Comlink.Remote<TrainerApi> {
  // Vite bundles the worker from this exact `new Worker(new URL(...), { type: 'module' })` form.
  trainer ??= Comlink.wrap<TrainerApi>(new Worker(new URL('./worker.ts', import.meta.url), { type: 'module', name: 'rlplay-trainer' }));
  return trainer;
}

/** The page's callbacks, passed by reference so the Worker can call them. */
export function trainerEvents(events: TrainerEvents): TrainerEvents {
  return Comlink.proxy(events);
}
