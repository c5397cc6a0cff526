import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** CLI_ROOT is @headway/cli's package directory, two levels above dist/src. */
export const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** BUILD_INFO_FILE is written into the package by `npm pack` (scripts/build-info.mjs) and removed after. */
export const BUILD_INFO_FILE = 'build-info.json';

/** BuildInfo is what `headway version` reports about the build itself. */
export interface BuildInfo {
  version: string;
  /** commit is `git describe` of the source: a tag, or a short hash, `-dirty` with local changes; `unknown` when neither a packed record nor a checkout says. */
  commit: string;
}

/**
 * gitDescribe names the commit of the checkout holding the CLI at `root`, or undefined
 * when `root` is not this repository's packages/cli (an installed package may sit inside
 * some other git work tree, whose commit says nothing about the CLI).
 */
export function gitDescribe(root: string): string | undefined {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).trim();
  try {
    if (resolve(git('rev-parse', '--show-toplevel'), 'packages', 'cli') !== resolve(root)) return undefined;
    return git('describe', '--tags', '--always', '--dirty');
  } catch {
    return undefined;
  }
}

/**
 * buildInfo describes the CLI at `root` (its package directory). A packed package carries
 * the commit it was packed from in build-info.json; a source checkout asks git at run time
 * (so the answer follows the tree, not the last pack); anything else says `unknown`.
 */
export function buildInfo(root: string): BuildInfo {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string };
  const version = pkg.version ?? 'unknown';
  const recorded = join(root, BUILD_INFO_FILE);
  if (existsSync(recorded)) {
    const info = JSON.parse(readFileSync(recorded, 'utf8')) as { commit?: unknown };
    if (typeof info.commit === 'string' && info.commit !== '') return { version, commit: info.commit };
  }
  return { version, commit: gitDescribe(root) ?? 'unknown' };
}
