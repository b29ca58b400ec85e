// Values vite.config.ts writes into the app at build time (its `define`).

/** The files of the embedded default model folder (public/models/rlplay-agent-mini), '/'-separated. */
declare const __EMBEDDED_MODEL_FILES__: readonly string[];
