// rlplay serve's settings, with the environment's limits, defined once: serveOpenEnv's defaults and
// checks, the command's options and --help (src/cli/commands/serve.ts) and the options table of
// docs/scale-out.md all read them.
import { ENV_LIMIT_SETTINGS } from '../env/settings.ts';
import { defaultsOf, integerSetting, numberSetting, stringListSetting, stringSetting, type SettingsOf } from '../common/settings.ts';

export const SERVE_SETTINGS = {
  port: integerSetting(8000, 'TCP port, as OpenEnv spaces expect; 0 picks a free one.', { min: 0, max: 65535 }),
  host: stringSetting('127.0.0.1', 'Address to listen on; 0.0.0.0 listens on every interface (e.g. in a container).', 'address'),
  maxSessions: integerSetting(256, 'Environment instances alive at once: WebSocket sessions and HTTP /reset and /step requests together; one more is refused (CAPACITY_REACHED, HTTP 503).', {
    min: 1,
  }),
  idleTimeout: numberSetting(600, 'A session with no message for this long is closed (0: never).', { min: 0, unit: 'seconds' }),
  ...ENV_LIMIT_SETTINGS,
  maxMessageBytes: integerSetting(1 << 20, 'Largest WebSocket message or HTTP request body answered normally; a larger one gets VALIDATION_ERROR (HTTP 413).', {
    min: 1024,
    unit: 'bytes',
  }),
  allowOrigin: stringListSetting(
    "A web page's origin (e.g. http://localhost:5173) whose requests are accepted, or * for any; repeat for more. Requests from other pages are refused (403); trainers and curl send no Origin and pass.",
    'origin',
  ),
};

export type ServeSettings = SettingsOf<typeof SERVE_SETTINGS>;

export const SERVE_DEFAULTS: ServeSettings = defaultsOf(SERVE_SETTINGS);
