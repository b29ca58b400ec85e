// The evaluation report as a standalone HTML page: styles, charts (inline SVG) and sample
// transcripts inside the one file, nothing fetched, so it opens offline and can be attached to a
// message or an issue. Also the same data as JSON.
import { describeChange, pairedChange, type Estimate, type EvaluationReport } from '../rl/evaluate.ts';
import type { Metric } from '../store/types.ts';
import type { EpisodeView, EvaluationComparison } from './training/protocol.ts';

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** A rate with its 95% interval, in percent: `40% [22, 61]`. */
export const formatRate = (e: Estimate) => (Number.isFinite(e.value) ? `${(100 * e.value).toFixed(0)}% [${(100 * e.low).toFixed(0)}, ${(100 * e.high).toFixed(0)}]` : '–');
/** A mean with its 95% interval: `0.45 [0.30, 0.60]`. */
export const formatEstimate = (e: Estimate, digits = 2) => (Number.isFinite(e.value) ? `${e.value.toFixed(digits)} [${e.low.toFixed(digits)}, ${e.high.toFixed(digits)}]` : '–');

/** A line chart of one metric against episodes, as inline SVG with its axes labelled. */
export function svgChart(title: string, points: { x: number; y: number }[], unit = ''): string {
  const finite = points.filter((p) => Number.isFinite(p.y));
  const [W, H, L, B] = [420, 180, 48, 28];
  if (finite.length === 0) return `<figure><figcaption>${escapeHtml(title)}</figcaption><p class="muted">No data.</p></figure>`;
  const xs = finite.map((p) => p.x);
  const ys = finite.map((p) => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs, Math.min(...xs) + 1)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
  const px = (x: number) => L + ((x - x0) / (x1 - x0)) * (W - L - 10);
  const py = (y: number) => H - B - ((y - y0) / (y1 - y0)) * (H - B - 10);
  const line = finite.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
  const label = (v: number) => `${Number(v.toPrecision(3))}${unit}`;
  return `<figure><figcaption>${escapeHtml(title)}</figcaption><svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${escapeHtml(title)}">
<line x1="${L}" y1="${H - B}" x2="${W - 10}" y2="${H - B}" class="axis"/><line x1="${L}" y1="10" x2="${L}" y2="${H - B}" class="axis"/>
<text x="${L - 6}" y="${py(y1) + 4}" text-anchor="end">${label(y1)}</text><text x="${L - 6}" y="${py(y0) + 4}" text-anchor="end">${label(y0)}</text>
<text x="${L}" y="${H - 8}">${x0}</text><text x="${W - 10}" y="${H - 8}" text-anchor="end">${x1} episodes</text>
<polyline points="${line}" class="series"/>${finite.map((p) => `<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="2.5"/>`).join('')}
</svg></figure>`;
}

function series(metrics: Metric[], name: string, scale = 1) {
  return metrics.filter((m) => m.name === name).map((m) => ({ x: m.step, y: m.value * scale }));
}

function transcript(episode: EpisodeView): string {
  return `<details><summary>seed ${episode.seed}: return ${episode.totalReward.toFixed(2)}, ${episode.success ? 'success' : 'no success'}${episode.error ? ', environment error' : ''}</summary><ol>${episode.steps
    .map((s) => `<li><pre>${escapeHtml(s.observation)}</pre><p><b>Agent</b> <code>${escapeHtml(s.action)}</code> reward ${s.reward.toFixed(2)}</p></li>`)
    .join('')}</ol>${episode.error ? `<p class="error">${escapeHtml(episode.error)}</p>` : ''}</details>`;
}

function row(name: string, before: string, after: string): string {
  return `<tr><th scope="row">${name}</th><td>${before}</td><td>${after}</td></tr>`;
}

export function reportHtml(c: EvaluationComparison): string {
  const config = c.config as { env?: string; algo?: string; model?: string; episodes?: number; seed?: number; mode?: string };
  const table = (b: EvaluationReport, a: EvaluationReport) =>
    `<table><thead><tr><th></th><th scope="col">Base model</th><th scope="col">After training</th></tr></thead><tbody>${row('Success rate', formatRate(b.successRate), formatRate(a.successRate))}${row('Mean return', formatEstimate(b.meanReturn), formatEstimate(a.meanReturn))}${row('Episode length', formatEstimate(b.meanLength), formatEstimate(a.meanLength))}${row('Episodes', String(b.episodes), String(a.episodes))}</tbody></table>`;
  const delta = 100 * (c.after.successRate.value - c.before.successRate.value);
  const change = pairedChange(c.before, c.after);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rlplay report: ${escapeHtml(c.runId)}</title>
<style>
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1c2230;background:#f4f5f7;margin:0;line-height:1.5}
main{max-width:920px;margin:0 auto;padding:1.5rem}section{background:#fff;border:1px solid #dde1e8;border-radius:10px;padding:1rem 1.25rem;margin-bottom:1rem}
h1{font-size:1.4rem}h2{font-size:1.05rem;margin-top:0}table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #dde1e8}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:1rem}figure{margin:0}figcaption{font-weight:600;font-size:.9rem}
svg{width:100%;height:auto}svg text{font-size:11px;fill:#5d6677}.axis{stroke:#c5cbd6}.series{fill:none;stroke:#3b5bdb;stroke-width:2}circle{fill:#3b5bdb}
pre{white-space:pre-wrap;font-size:.8rem;color:#5d6677;margin:0}code{background:#eef0f4;padding:0 .25rem;border-radius:4px}.muted{color:#5d6677}.error{color:#c92a2a}
.delta{font-size:1.1rem;font-weight:600}
</style></head><body><main>
<h1>rlplay report: ${escapeHtml(c.runId)}</h1>
<section><h2>Experiment</h2><p>${escapeHtml(String(config.algo ?? '').toUpperCase())} on <b>${escapeHtml(String(config.env ?? ''))}</b> (${escapeHtml(String(config.mode ?? ''))} mode), ${config.episodes ?? '?'} training episodes, seed ${config.seed ?? '?'}, model <code>${escapeHtml(String(config.model ?? ''))}</code>. Evaluated at update ${c.update} on ${c.after.episodes} held-out test episodes, ${new Date(c.createdAt).toISOString()}.</p></section>
<section><h2>Before and after (95% confidence intervals)</h2>${table(c.before, c.after)}<p class="delta">Success ${delta >= 0 ? '+' : ''}${delta.toFixed(0)} percentage points.</p>${change ? `<p>Episode by episode: ${escapeHtml(describeChange(change))}.</p>` : ''}${c.after.failedEpisodes + c.before.failedEpisodes > 0 ? `<p class="error">${c.before.failedEpisodes + c.after.failedEpisodes} episodes ended with an environment error and are left out: ${escapeHtml(c.after.firstError ?? c.before.firstError ?? '')}</p>` : ''}</section>
<section><h2>Training</h2><div class="charts">${svgChart('Reward per episode', series(c.metrics, 'charts/episodic_return'))}${svgChart('Success rate', series(c.metrics, 'charts/success_rate', 100), '%')}${svgChart('Policy loss', series(c.metrics, 'losses/policy_loss'))}${svgChart('Entropy (nats)', series(c.metrics, 'losses/entropy'))}</div></section>
<section><h2>Sample test episodes: base model</h2>${c.samples.before.map(transcript).join('')}</section>
<section><h2>Sample test episodes: after training</h2>${c.samples.after.map(transcript).join('')}</section>
<p class="muted">Made by rlplay in the browser. This file is self-contained: it loads nothing from the network.</p>
</main></body></html>
`;
}
