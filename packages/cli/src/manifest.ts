import { existsSync, readFileSync, readdirSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Plugin } from '@oclif/core';

/** MANIFEST_FILE is where oclif looks for a plugin's command manifest: the package's root. */
export const MANIFEST_FILE = 'oclif.manifest.json';

/**
 * commandsDir is where a plugin's compiled commands live: package.json's `oclif.commands`
 * (a directory, or `{ target }` for the pattern strategy), `dist/src/commands` by default.
 */
function commandsDir(root: string, pkg: { oclif?: { commands?: string | { target?: string } } }): string {
  const c = pkg.oclif?.commands;
  return join(root, (typeof c === 'string' ? c : c?.target) ?? './dist/src/commands');
}

/**
 * newestSourceMtime is the latest modification time among the compiled command files,
 * the directories holding them (a deleted or added command changes its directory) and
 * package.json (oclif settings, version). It stats a few dozen entries: well under a
 * millisecond, against the hundreds oclif spends importing every command without a manifest.
 */
function newestSourceMtime(root: string): number {
  const pkgPath = join(root, 'package.json');
  let newest = statSync(pkgPath).mtimeMs;
  const walk = (dir: string): void => {
    newest = Math.max(newest, statSync(dir).mtimeMs);
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(dir, entry.name));
      else if (entry.name.endsWith('.js')) newest = Math.max(newest, statSync(join(dir, entry.name)).mtimeMs);
    }
  };
  const commands = commandsDir(root, JSON.parse(readFileSync(pkgPath, 'utf8')));
  if (existsSync(commands)) walk(commands);
  return newest;
}

/**
 * manifestIsFresh says whether oclif.manifest.json exists and was written after every
 * compiled command. oclif trusts the manifest blindly (a command added after it was
 * written is "not found"), so a stale one must be rewritten before oclif reads it.
 * Packed tarballs give every file the same mtime, so an installed CLI always reads fresh.
 */
export function manifestIsFresh(root: string): boolean {
  const path = join(root, MANIFEST_FILE);
  if (!existsSync(path)) return false;
  return statSync(path).mtimeMs >= newestSourceMtime(root);
}

/**
 * writeManifest has oclif describe every command (it imports each one) and stores the
 * result as oclif.manifest.json, atomically (a temporary file renamed over the old one),
 * so concurrent CLI runs never read half a file. With it, a command run imports only
 * its own module instead of all of them, and `--help` imports none.
 */
export async function writeManifest(root: string): Promise<number> {
  const plugin = new Plugin({ root, type: 'core', isRoot: true, ignoreManifest: true, errorOnManifestCreate: true });
  await plugin.load();
  const path = join(root, MANIFEST_FILE);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(plugin.manifest, null, 2) + '\n');
  try {
    renameSync(tmp, path);
  } catch (e) {
    unlinkSync(tmp);
    throw e;
  }
  return Object.keys(plugin.manifest.commands).length;
}

/**
 * ensureManifest rewrites a missing or stale manifest before oclif starts (a development
 * tree after `tsc -b`). A failure to write (a read-only install) is not fatal: oclif then
 * falls back to importing every command, which is slower but correct when no manifest
 * exists; a stale one that cannot be rewritten is removed for the same reason.
 */
export async function ensureManifest(root: string): Promise<void> {
  try {
    if (manifestIsFresh(root)) return;
    await writeManifest(root);
  } catch {
    try {
      unlinkSync(join(root, MANIFEST_FILE));
    } catch {
      // nothing to remove, or not allowed to: oclif reads what is there
    }
  }
}
