// Share links: the whole experiment (model, environment, policy mode, algorithm and its settings,
// episodes, seed, LoRA rank, alpha and targets) in the URL fragment, as deflated JSON in base64url,
// so that opening the link restores the setup and the fragment never reaches a server. A link that
// was cut short or edited fails with a message that says so.
import { deflateSync, inflateSync, strFromU8, strToU8 } from 'fflate';
import { LORA_TARGETS, type LoraTarget } from '../engine/lora/adapter.ts';
import { DEFAULTS_VERSION, settingsAsOf } from '../rl/index.ts';

export const SHARE_VERSION = 1;
/** Longer URLs are unreliable in chat tools and some browsers: such a setup is shared as a file. */
export const MAX_LINK_LENGTH = 8000;
const PREFIX = '#x=';

export interface SharedExperiment {
  model: string;
  env: string;
  mode: 'choice' | 'text';
  algo: string;
  /** The algorithm settings that differ from its defaults. */
  algorithm: Record<string, unknown>;
  episodes: number;
  seed: number;
  loraR: number;
  /** LoRA's alpha (scale alpha / r); links made before it was shared mean 2 r. */
  loraAlpha?: number;
  /** The projections that get LoRA; links made before they were shared mean all of them. */
  loraTargets?: LoraTarget[];
  /** A custom environment's source, when `env` is one (run only after the user agrees). */
  envSource?: string;
}

export class ShareLinkError extends Error {
  override name = 'ShareLinkError';
}

function toBase64Url(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(text: string): Uint8Array {
  const base64 = text.replace(/-/g, '+').replace(/_/g, '/');
  const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/** The link for `experiment` on the page at `base` (its fragment replaced). */
export function shareLink(base: string, experiment: SharedExperiment): string {
  const url = new URL(base);
  url.hash = '';
  return `${url.href}${PREFIX}${toBase64Url(deflateSync(strToU8(JSON.stringify({ v: SHARE_VERSION, defaults: DEFAULTS_VERSION, ...experiment })), { level: 9 }))}`;
}

/** The experiment in a URL fragment; null when the fragment holds none; ShareLinkError when it is damaged. */
export function readShareFragment(hash: string): SharedExperiment | null {
  if (!hash.startsWith(PREFIX)) return null;
  let value: unknown;
  try {
    value = JSON.parse(strFromU8(inflateSync(fromBase64Url(hash.slice(PREFIX.length)))));
  } catch {
    throw new ShareLinkError('This share link is damaged or cut short (its experiment cannot be read). Ask for the whole link again, or for the setup as a file.');
  }
  // `defaults`: the version of the algorithms' defaults that `algorithm` overrides; links made before it was recorded mean 1.
  const shared = value as Partial<SharedExperiment> & { v?: unknown; defaults?: unknown };
  if (shared.v !== SHARE_VERSION) throw new ShareLinkError(`This share link was made by another version of rlplay (format ${String(shared.v)}, this page reads ${SHARE_VERSION}).`);
  const problems: string[] = [];
  if (typeof shared.model !== 'string') problems.push('model');
  if (typeof shared.env !== 'string') problems.push('env');
  if (shared.mode !== 'choice' && shared.mode !== 'text') problems.push('mode');
  if (typeof shared.algo !== 'string') problems.push('algo');
  if (typeof shared.algorithm !== 'object' || shared.algorithm === null || Array.isArray(shared.algorithm)) problems.push('algorithm');
  for (const key of ['episodes', 'seed', 'loraR'] as const) if (!Number.isSafeInteger(shared[key]) || (shared[key] as number) < 0) problems.push(key);
  if (shared.loraAlpha !== undefined && !(typeof shared.loraAlpha === 'number' && shared.loraAlpha > 0 && Number.isFinite(shared.loraAlpha))) problems.push('loraAlpha');
  const targets = shared.loraTargets;
  if (targets !== undefined && !(Array.isArray(targets) && targets.length > 0 && targets.every((t) => (LORA_TARGETS as readonly unknown[]).includes(t)))) problems.push('loraTargets');
  if (shared.envSource !== undefined && typeof shared.envSource !== 'string') problems.push('envSource');
  if (shared.defaults !== undefined && !(Number.isSafeInteger(shared.defaults) && (shared.defaults as number) >= 1)) problems.push('defaults');
  if (problems.length) throw new ShareLinkError(`This share link's experiment is incomplete or edited (bad ${problems.join(', ')}). Ask for the link again.`);
  // Its settings as overrides of today's defaults, whichever defaults it was made with.
  const defaults = (shared.defaults as number | undefined) ?? 1;
  if (defaults > DEFAULTS_VERSION) throw new ShareLinkError(`This share link was made by a newer rlplay (algorithm defaults version ${defaults}, this page knows up to ${DEFAULTS_VERSION}): open it where rlplay is up to date.`);
  const algorithm = settingsAsOf(shared.algo!, defaults, shared.algorithm!);
  return {
    model: shared.model!,
    env: shared.env!,
    mode: shared.mode!,
    algo: shared.algo!,
    algorithm,
    episodes: shared.episodes!,
    seed: shared.seed!,
    loraR: shared.loraR!,
    ...(shared.loraAlpha !== undefined ? { loraAlpha: shared.loraAlpha } : {}),
    ...(targets !== undefined ? { loraTargets: targets } : {}),
    ...(shared.envSource !== undefined ? { envSource: shared.envSource } : {}),
  };
}
