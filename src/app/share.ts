// Share links: the whole experiment (model, environment, policy mode, algorithm and its settings,
// episodes, seed, LoRA rank, alpha and targets) in the URL fragment, as deflated JSON and the JSON's
// CRC-32 in base64url, so that opening the link restores the setup and the fragment never reaches a
// server. The checksum is checked and inflating stops at a size cap: a link that was cut short or
// edited fails with a message that says so, never opens another experiment. Links older than the
// checksum (`#x=`) still open, with a warning that they cannot be checked. A setup too long for a
// link is shared as a file of the same JSON, which "Open setup file" reads.
import { deflateSync, Inflate, strFromU8, strToU8 } from 'fflate';
import { concatenate } from '../engine/model/source.ts';
import { LORA_TARGETS, type LoraTarget } from '../engine/lora/adapter.ts';
import { DEFAULTS_VERSION, settingsAsOf } from '../rl/index.ts';

export const SHARE_VERSION = 1;
/** Longer URLs are unreliable in chat tools and some browsers: such a setup is shared as a file. */
export const MAX_LINK_LENGTH = 8000;
/** The most JSON a link may inflate to: far above any link shareLink makes, far below a deflate bomb's. */
export const MAX_SETUP_BYTES = 256 << 10;
/** A setup file's size limit: it holds what did not fit a link, a custom environment's source mostly. */
export const MAX_SETUP_FILE_BYTES = 4 << 20;
/** The name Share setup downloads a setup under when it is too long for a link. */
export const SETUP_FILE_NAME = 'rlplay-experiment.json';
const PREFIX = '#s=';
/** Links made before the checksum: deflated JSON alone. */
const UNCHECKED_PREFIX = '#x=';
/** Inflated this many compressed bytes at a time, one push yields at most ~1,032 times as much (deflate's ratio limit). */
const INFLATE_STEP = 512;
const DAMAGED = 'This share link is damaged or cut short (its experiment cannot be read). Ask for the whole link again, or for the setup as a file.';

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

/** The JSON a link carries and a setup file holds (indented by `space`): the experiment with the versions it was made under. */
export function setupJson(experiment: SharedExperiment, space?: number): string {
  return JSON.stringify({ v: SHARE_VERSION, defaults: DEFAULTS_VERSION, ...experiment }, null, space);
}

/** The link for `experiment` on the page at `base` (its fragment replaced). */
export function shareLink(base: string, experiment: SharedExperiment): string {
  const url = new URL(base);
  url.hash = '';
  const json = strToU8(setupJson(experiment));
  const deflated = deflateSync(json, { level: 9 });
  const payload = new Uint8Array(deflated.length + 4);
  payload.set(deflated);
  new DataView(payload.buffer).setUint32(deflated.length, crc32(json));
  return `${url.href}${PREFIX}${toBase64Url(payload)}`;
}

/** The experiment in a URL fragment; null when the fragment holds none; ShareLinkError when it is damaged. */
export function readShareFragment(hash: string): SharedExperiment | null {
  const checked = hash.startsWith(PREFIX);
  if (!checked && !hash.startsWith(UNCHECKED_PREFIX)) return null;
  if (hash.length > MAX_LINK_LENGTH) {
    throw new ShareLinkError(`This share link's experiment is ${hash.length} characters long, more than the ${MAX_LINK_LENGTH} of any link rlplay makes: it is not an rlplay link. Ask for the setup as a file.`);
  }
  let text: string;
  try {
    const bytes = fromBase64Url(hash.slice(PREFIX.length));
    text = strFromU8(checked ? inflateChecked(bytes) : inflateBounded(bytes));
  } catch (error) {
    if (error instanceof ShareLinkError) throw error;
    throw new ShareLinkError(DAMAGED);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ShareLinkError(DAMAGED);
  }
  return parseSetup(value, 'share link');
}

/** Whether the fragment is a link made before links carried a checksum, which an edit may have changed unnoticed. */
export function isUncheckedShareFragment(hash: string): boolean {
  return hash.startsWith(UNCHECKED_PREFIX);
}

/** The experiment in a setup file (what Share setup downloads when the link would be too long). */
export async function readSetupFile(file: Blob & { name: string }): Promise<SharedExperiment> {
  if (file.size > MAX_SETUP_FILE_BYTES) {
    throw new ShareLinkError(`${file.name} is ${file.size} bytes, more than the ${MAX_SETUP_FILE_BYTES >> 20} MiB of any setup file: open the ${SETUP_FILE_NAME} that Share setup downloaded.`);
  }
  let value: unknown;
  try {
    value = JSON.parse(await file.text());
  } catch (error) {
    throw new ShareLinkError(`${file.name} is not a setup file: it is not valid JSON (${(error as Error).message}). Open the ${SETUP_FILE_NAME} that Share setup downloaded.`);
  }
  return parseSetup(value, `setup file ${file.name}`);
}

/** Deflated JSON followed by the CRC-32 of the JSON: the JSON, when it matches. */
function inflateChecked(bytes: Uint8Array): Uint8Array {
  if (bytes.length < 5) throw new ShareLinkError(DAMAGED);
  const json = inflateBounded(bytes.subarray(0, -4));
  if (crc32(json) !== new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(bytes.length - 4)) throw new ShareLinkError(DAMAGED);
  return json;
}

/** Inflates in small steps and stops as soon as the output passes MAX_SETUP_BYTES. */
function inflateBounded(bytes: Uint8Array): Uint8Array {
  if (bytes.length === 0) throw new ShareLinkError(DAMAGED);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const stream = new Inflate((chunk) => {
    size += chunk.length;
    if (size > MAX_SETUP_BYTES) {
      throw new ShareLinkError(`This share link inflates to more than ${MAX_SETUP_BYTES >> 10} KiB, more than any experiment: it is not an rlplay link.`);
    }
    chunks.push(chunk);
  });
  for (let at = 0; at < bytes.length; at += INFLATE_STEP) stream.push(bytes.subarray(at, at + INFLATE_STEP), at + INFLATE_STEP >= bytes.length);
  return concatenate(chunks, size);
}

// CRC-32 as gzip computes it (RFC 1952): it catches every change of up to 32 consecutive bits, which
// adler32 does not (an edit that copies "fau" for "des" keeps adler32's sums).
const CRC_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c;
});

function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** The experiment in a link's or a file's JSON, checked field by field; `where` names which in messages. */
function parseSetup(value: unknown, where: string): SharedExperiment {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ShareLinkError(`This ${where} holds ${value === null ? 'null' : Array.isArray(value) ? 'a list' : `a ${typeof value}`}, not an experiment. Ask for the setup again.`);
  }
  // `defaults`: the version of the algorithms' defaults that `algorithm` overrides; links made before it was recorded mean 1.
  const shared = value as Partial<SharedExperiment> & { v?: unknown; defaults?: unknown };
  if (shared.v === undefined) throw new ShareLinkError(`This ${where} records no format version (v): it is not an rlplay setup, or one saved before rlplay could open them. Share the setup again.`);
  if (shared.v !== SHARE_VERSION) throw new ShareLinkError(`This ${where} was made by another version of rlplay (format ${String(shared.v)}, this page reads ${SHARE_VERSION}).`);
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
  if (problems.length) throw new ShareLinkError(`This ${where}'s experiment is incomplete or edited (bad ${problems.join(', ')}). Ask for it again.`);
  // Its settings as overrides of today's defaults, whichever defaults it was made with.
  const defaults = (shared.defaults as number | undefined) ?? 1;
  if (defaults > DEFAULTS_VERSION) throw new ShareLinkError(`This ${where} was made by a newer rlplay (algorithm defaults version ${defaults}, this page knows up to ${DEFAULTS_VERSION}): open it where rlplay is up to date.`);
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
