// Which models the page offers and how it names them (engine/model/source-browser.ts): the embedded
// default (public/models/, shipped with the app), the curated Hub models as `hf:` ids, folders the
// user picks from their disk, and the stories260K fixture on the dev server.
//
// Hub settings: `?hub=URL` points Hub ids at a mirror (as HF_ENDPOINT does for the CLI); a token
// for gated repositories is kept in this tab's sessionStorage only — never in runs or share links.
import { CURATED_MODELS, formatParameterCount, HUB_PREFIX, isHubId } from '../engine/model/hub.ts';
import { folderKey, FOLDER_PREFIX, isFolderLocation, openBrowserModelSource, type BrowserSourceOptions, type PickedFolder } from '../engine/model/source-browser.ts';
import type { ModelRef } from './training/protocol.ts';
import { parseModelConfig } from '../engine/model/config.ts';
import { readJsonFile } from '../engine/model/source.ts';
import { loadTokenizer } from '../engine/model/tokenizer.ts';
import type { ModelSource, Tokenizer } from '../engine/model/types.ts';

export const DEFAULT_MODEL_URL = '/models/rlplay-agent-mini/';
export const FIXTURE_URL = '/fixtures/stories260K/';
const TOKEN_KEY = 'rlplay-hf-token';

export interface ModelChoice {
  location: string;
  label: string;
}

/** The Hub models the engine is known to run. */
export const HUB_CHOICES: ModelChoice[] = CURATED_MODELS.map((m) => ({
  location: `${HUB_PREFIX}${m.id}`,
  label: `${m.id} (${formatParameterCount(m.parameters)}, download)`,
}));

const pickedFolders = new Map<string, PickedFolder>();

/** Keeps a picked folder's files for this page's lifetime; returns its location, `folder:NAME`. */
export function addPickedFolder(folder: PickedFolder): string {
  pickedFolders.set(folder.name, folder);
  return `${FOLDER_PREFIX}${folder.name}`;
}

export function hubToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

export function setHubToken(token: string): void {
  if (token.trim()) sessionStorage.setItem(TOKEN_KEY, token.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** What opening a location needs besides its name: the Hub settings and the picked folders. */
export function sourceOptions(): BrowserSourceOptions {
  const endpoint = new URLSearchParams(location.search).get('hub') ?? undefined;
  return { hub: { endpoint, token: hubToken() || undefined }, folders: pickedFolders, listings: shippedListings() };
}

/** The files of the folders shipped with the app, keyed by their absolute URL (see folderKey). */
function shippedListings(): Record<string, readonly string[]> {
  return __EMBEDDED_MODEL_FILES__.length > 0 ? { [folderKey(resolveModelLocation(DEFAULT_MODEL_URL))]: __EMBEDDED_MODEL_FILES__ } : {};
}

/** Hub ids and picked folders as written; folder URLs made absolute (relative ones resolve against the page). */
export function resolveModelLocation(text: string): string {
  const trimmed = text.trim();
  if (isHubId(trimmed) || isFolderLocation(trimmed)) return trimmed;
  return new URL(trimmed, location.href).href;
}

export function pageModelSource(text: string): ModelSource {
  return openBrowserModelSource(resolveModelLocation(text), sourceOptions());
}

/** Whether this server has a model folder at `url` (a static host may answer any path with its index.html). */
async function hasModel(url: string): Promise<boolean> {
  try {
    const response = await fetch(`${url}config.json`, { method: 'HEAD', headers: { Accept: 'application/json' } });
    const isHtml = response.headers.get('content-type')?.startsWith('text/html') ?? false;
    return response.ok && !isHtml;
  } catch {
    return false;
  }
}

/**
 * The local folders this server has: the embedded default, known from the build, then the fixture,
 * which only the dev server has (vite.config.ts serves ../shared/fixtures), so the built app never
 * asks for it.
 */
export async function localChoices(): Promise<ModelChoice[]> {
  const embedded = __EMBEDDED_MODEL_FILES__.includes('config.json');
  const fixture = import.meta.env.DEV && (await hasModel(FIXTURE_URL));
  return [
    ...(embedded ? [{ location: DEFAULT_MODEL_URL, label: 'rlplay-agent-mini (embedded default, no download)' }] : []),
    ...(fixture ? [{ location: FIXTURE_URL, label: 'stories260K (test fixture)' }] : []),
  ];
}

/** The `model` query parameter when given; else the first local folder; else nothing. */
export async function defaultModelLocation(): Promise<string> {
  const fromQuery = new URLSearchParams(location.search).get('model');
  if (fromQuery) return fromQuery;
  return (await localChoices())[0]?.location ?? '';
}

/** A location with what the training Worker needs to open it (only the picked folder it names travels). */
export function modelRef(text: string): ModelRef {
  const location = resolveModelLocation(text);
  const { hub, folders, listings } = sourceOptions();
  const picked = isFolderLocation(location) ? folders?.get(location.slice(FOLDER_PREFIX.length)) : undefined;
  return { location, options: { hub, listings, ...(picked ? { folders: new Map([[picked.name, picked]]) } : {}) } };
}

const tokenizers = new Map<string, Promise<Tokenizer>>();

/** A model's tokenizer alone (config.json and the tokenizer files, no weights), kept per location. */
export function pageTokenizer(text: string): Promise<Tokenizer> {
  const location = resolveModelLocation(text);
  let tokenizer = tokenizers.get(location);
  if (!tokenizer) {
    const source = pageModelSource(location);
    tokenizer = readJsonFile(source, 'config.json').then((config) => loadTokenizer(source, parseModelConfig(config)));
    tokenizer.catch(() => tokenizers.delete(location));
    tokenizers.set(location, tokenizer);
  }
  return tokenizer;
}
