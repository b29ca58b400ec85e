// Which model folder the page offers to load first.

export const FIXTURE_URL = '/fixtures/stories260K/';

/**
 * The `model` query parameter when given; else the stories260K fixture when this server has it
 * (the dev server serves ../shared/fixtures/), else nothing.
 */
export async function defaultModelUrl(): Promise<string> {
  const fromQuery = new URLSearchParams(location.search).get('model');
  if (fromQuery) return fromQuery;
  try {
    const response = await fetch(`${FIXTURE_URL}config.json`, { method: 'HEAD', headers: { Accept: 'application/json' } });
    // A static host may answer any path with its index.html: that is not a model folder.
    const isHtml = response.headers.get('content-type')?.startsWith('text/html') ?? false;
    return response.ok && !isHtml ? FIXTURE_URL : '';
  } catch {
    return '';
  }
}

/** An absolute URL for the engine: relative folders resolve against the page. */
export function resolveModelUrl(url: string): string {
  return new URL(url.trim(), location.href).href;
}
