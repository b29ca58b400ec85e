// globalSetup of the unit and browser suites: in CI (CI set), where ../shared/fixtures is always
// beside the clone, a missing fixture fails the run at once, naming it, instead of letting every
// test that needs it skip and hide a broken path. A contributor's clone without it gets the skips.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const REQUIRED = [
  { path: '../../../shared/fixtures/stories260K/config.json', what: 'the stories260K reference model (../shared/fixtures/stories260K)' },
  { path: '../../public/models/rlplay-agent-mini/config.json', what: 'the embedded default model (public/models/rlplay-agent-mini; npm run model:default writes it)' },
];

export default function requireFixtures(): void {
  if (!process.env.CI) return;
  const missing = REQUIRED.filter(({ path }) => !existsSync(fileURLToPath(new URL(path, import.meta.url))));
  if (missing.length > 0) {
    throw new Error(`CI is set, but ${missing.map((m) => m.what).join(' and ')} ${missing.length > 1 ? 'are' : 'is'} missing: the tests that need ${missing.length > 1 ? 'them' : 'it'} would skip. Put the fixtures in place, or unset CI to run with the skips.`);
  }
}
