import { existsSync } from 'node:fs';

/** chromiumPath finds the system Chromium: $CHROMIUM_PATH, then Debian's and other usual names. */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  return candidates.find((p): p is string => Boolean(p) && existsSync(p!));
}

/** CHROMIUM_ARGS run headless Chromium in a container (no sandbox, no GPU, no /dev/shm). */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'];
