// Which model folders the page offers: the embedded default (public/models/, shipped with the
// app), the curated Hub models, and the stories260K fixture on the dev server.
import { CURATED_MODELS, formatParameterCount } from '../engine/model/hub.ts';

export const DEFAULT_MODEL_URL = '/models/rlplay-agent-mini/';
export const FIXTURE_URL = '/fixtures/stories260K/';

export interface ModelChoice {
  url: string;
  label: string;
}

/** The Hub models the engine is known to run, as folder URLs. */
export const HUB_CHOICES: ModelChoice[] = CURATED_MODELS.map((m) => ({
  url: `https://huggingface.co/${m.id}/resolve/main/`,
  label: `${m.id} (${formatParameterCount(m.parameters)}, download)`,
}));

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

/** The local folders this server has: the embedded default, then the fixture (dev server only). */
export async function localChoices(): Promise<ModelChoice[]> {
  const [embedded, fixture] = await Promise.all([hasModel(DEFAULT_MODEL_URL), hasModel(FIXTURE_URL)]);
  return [
    ...(embedded ? [{ url: DEFAULT_MODEL_URL, label: 'rlplay-agent-mini (embedded default, no download)' }] : []),
    ...(fixture ? [{ url: FIXTURE_URL, label: 'stories260K (test fixture)' }] : []),
  ];
}

/** The `model` query parameter when given; else the first local folder; else nothing. */
export async function defaultModelUrl(): Promise<string> {
  const fromQuery = new URLSearchParams(location.search).get('model');
  if (fromQuery) return fromQuery;
  return (await localChoices())[0]?.url ?? '';
}

/** An absolute URL for the engine: relative folders resolve against the page. */
export function resolveModelUrl(url: string): string {
  return new URL(url.trim(), location.href).href;
}
