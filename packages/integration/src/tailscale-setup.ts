/**
 * Finding the Tailscale clients `.ci/install-tailscale.sh` installed, and setting a test up
 * around them: skip or fail when none is there, tear devices down in order.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TailscaleBinaries, TapLike } from './tailscale-types.js';

const VERSION_DIR = /^v?\d+\.\d+\.\d+$/;

/** repoRoot is the npm workspace root: the nearest ancestor whose package.json declares workspaces. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        const parsed: unknown = JSON.parse(readFileSync(pkg, 'utf8'));
        if (typeof parsed === 'object' && parsed !== null && 'workspaces' in parsed) return dir;
      } catch {
        // An unreadable package.json is not the root; keep walking up.
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`repoRoot: no package.json with "workspaces" above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** tailscaleHome is where install-tailscale.sh puts versions: $TAILSCALE_HOME or <repo>/.ci-work/tailscale. */
export function tailscaleHome(): string {
  const fromEnv = process.env.TAILSCALE_HOME;
  return fromEnv !== undefined && fromEnv !== '' ? fromEnv : join(repoRoot(), '.ci-work', 'tailscale');
}

function versionParts(version: string): number[] {
  return version.replace(/^v/, '').split('.').map((p) => Number(p));
}

function compareVersionsDescending(a: string, b: string): number {
  const pa = versionParts(a);
  const pb = versionParts(b);
  for (let i = 0; i < 3; i++) {
    const diff = (pb[i] ?? 0) - (pa[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

function isExecutableFile(path: string): boolean {
  try {
    const st = statSync(path);
    return st.isFile() && (st.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/**
 * findTailscaleBinaries lists installed versions, newest first. Only complete
 * installs count (both binaries present and executable), so a half-finished
 * build directory is never picked; empty when nothing is installed.
 */
export function findTailscaleBinaries(home: string = tailscaleHome()): TailscaleBinaries[] {
  let entries: string[];
  try {
    entries = readdirSync(home);
  } catch {
    return [];
  }
  const found: TailscaleBinaries[] = [];
  for (const entry of entries) {
    if (!VERSION_DIR.test(entry)) continue;
    const tailscale = join(home, entry, 'tailscale');
    const tailscaled = join(home, entry, 'tailscaled');
    if (isExecutableFile(tailscale) && isExecutableFile(tailscaled)) found.push({ version: entry, tailscale, tailscaled });
  }
  return found.sort((a, b) => compareVersionsDescending(a.version, b.version));
}

/**
 * cleanupStack returns a list whose functions run in reverse order when the test
 * ends (devices before the server that serves them); a failing step is reported
 * as a comment and does not stop the others.
 */
export function cleanupStack(t: { teardown(fn: () => Promise<void>): void; comment(msg: string): void }): Array<() => Promise<void> | void> {
  const cleanups: Array<() => Promise<void> | void> = [];
  t.teardown(async () => {
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch (err) {
        t.comment(`cleanup: ${(err as Error).message}`);
      }
    }
  });
  return cleanups;
}

/**
 * requireTailscale returns the installed clients, or an empty list after
 * skipping the test (locally) or failing it (when CI=true, where a missing
 * client means the install step broke and must not pass silently).
 */
export function requireTailscale(t: TapLike): TailscaleBinaries[] {
  const found = findTailscaleBinaries();
  if (found.length > 0) return found;
  const reason = `no Tailscale client installed under ${tailscaleHome()}; run .ci/install-tailscale.sh`;
  if (process.env.CI === 'true') {
    t.fail(reason);
  } else {
    t.comment(reason);
    t.skip(reason, () => undefined);
  }
  return [];
}
