// Progress lines on stderr: redrawn in place on a terminal, a few plain lines otherwise.

export interface ProgressReporter {
  update(label: string, done: number, total: number | null): void;
  done(message?: string): void;
}

function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

export function byteProgress(stream: NodeJS.WriteStream = process.stderr): ProgressReporter {
  const interactive = Boolean(stream.isTTY);
  let lastLabel = '';
  return {
    update(label, done, total) {
      const line = total ? `${label}: ${formatBytes(done)} / ${formatBytes(total)} (${Math.floor((100 * done) / total)}%)` : `${label}: ${formatBytes(done)}`;
      if (interactive) stream.write(`\r\x1b[2K${line}`);
      else if (label !== lastLabel) stream.write(`${label}...\n`);
      lastLabel = label;
    },
    done(message) {
      if (interactive) stream.write('\r\x1b[2K');
      if (message) stream.write(`${message}\n`);
    },
  };
}

/**
 * Training speed from now on, for a progress line: `count` is the run's onEpisode hook (episodes
 * played in this process; a resumed run's earlier ones do not count), `describe(remaining)` gives
 * e.g. "0.61 episodes/s  ETA 215 s".
 */
export function episodeSpeed(): { count: () => void; describe: (remaining: number) => string } {
  const started = performance.now();
  let played = 0;
  return {
    count: () => void played++,
    describe(remaining) {
      const rate = played / ((performance.now() - started) / 1000);
      return `${rate.toFixed(2)} episodes/s  ETA ${Math.max(0, Math.round(remaining / rate))} s`;
    },
  };
}
