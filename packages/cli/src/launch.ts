import { readFileSync, realpathSync } from 'node:fs';
import { createRequire, registerHooks } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { Config, settings } from '@oclif/core';
import { ensureManifest } from './manifest.js';

/**
 * SHARED_SPECIFIERS are the packages a plugin may take from the running `headway` instead
 * of bringing its own: the base command library and the oclif it is built on.
 */
const SHARED_SPECIFIERS = /^(?:@headway\/cli|@oclif\/core)(?:\/.*)?$/;

let shared = false;

/**
 * shareHostLibrary lets a plugin added with `headway plugins install` import `@headway/cli`
 * and `@oclif/core` (declared as peer dependencies) without a copy of its own. npm installs
 * such a plugin into oclif's data directory, where neither package can be found, and a
 * second copy would be worse than a missing one: its HeadwayCommand and UsageError would
 * not be the CLI's. A plugin that ships its own copy still gets it: the host's copy is
 * only the fallback when normal resolution fails. Synchronous in-thread hooks
 * (`module.registerHooks`, Node 22.15+) cost no loader thread at start-up.
 */
export function shareHostLibrary(): void {
  if (shared) return;
  shared = true;
  const host = import.meta.url;
  registerHooks({
    resolve(specifier, context, nextResolve) {
      try {
        return nextResolve(specifier, context);
      } catch (e) {
        const code = (e as { code?: string }).code;
        if ((code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') || !SHARED_SPECIFIERS.test(specifier)) throw e;
        return nextResolve(specifier, { ...context, parentURL: host });
      }
    },
  });
}

/**
 * sourcePluginRoots lists the CLI's core plugins (package.json `oclif.plugins`) that are
 * checked out as source (a workspace link, not a directory under node_modules): their
 * manifests go stale on every build, while installed packages ship a current one.
 */
export function sourcePluginRoots(root: string, plugins: readonly string[]): string[] {
  const require = createRequire(join(root, 'package.json'));
  const roots: string[] = [];
  for (const name of plugins) {
    try {
      const dir = dirname(realpathSync(require.resolve(`${name}/package.json`)));
      if (!dir.split(sep).includes('node_modules')) roots.push(dir);
    } catch {
      // not installed: oclif reports it when it loads the plugins
    }
  }
  return roots;
}

/**
 * ensureManifests brings oclif.manifest.json up to date for the CLI at `root` and each of
 * its core plugins checked out as source, before oclif reads them (it trusts a manifest
 * blindly: a command compiled after the manifest was written would be "not found").
 */
export async function ensureManifests(root: string): Promise<void> {
  await ensureManifest(root);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { oclif?: { plugins?: string[] } };
  for (const dir of sourcePluginRoots(root, pkg.oclif?.plugins ?? [])) await ensureManifest(dir);
}

/**
 * pluginsDir is where `headway plugins install` puts plugins (oclif's data directory):
 * $XDG_DATA_HOME/headway/plugins, by default ~/.local/share/headway/plugins. Not oclif's
 * own default, $XDG_DATA_HOME/headway: that is the server's default data_dir, and npm's
 * package.json and node_modules do not belong beside the database and keys.
 */
export function pluginsDir(env: NodeJS.ProcessEnv = process.env, home = homedir()): string {
  return join(env.XDG_DATA_HOME || join(home, '.local', 'share'), 'headway', 'plugins');
}

let scoped = false;

/**
 * keepPluginsApart makes oclif put user plugins in pluginsDir() whatever the environment
 * says. oclif takes its data directory from HEADWAY_DATA_DIR, which is also the server's
 * `data_dir` key: honouring it would install npm packages into the server's data and
 * load plugins from there. oclif reads the variable through Config.scopedEnvVar each time
 * it builds a Config (it rebuilds one before every command), so the answer is changed
 * there, once for all of them; the variable itself stays as set for the server's config.
 */
function keepPluginsApart(): void {
  if (scoped) return;
  scoped = true;
  const scopedEnvVar = Config.prototype.scopedEnvVar;
  Config.prototype.scopedEnvVar = function (this: Config, k: string): string | undefined {
    return k === 'DATA_DIR' ? pluginsDir() : scopedEnvVar.call(this, k);
  };
}

/**
 * loadCliConfig loads oclif's configuration for the CLI at `root`, with user plugins in
 * pluginsDir(). Commands run from compiled JavaScript only, so oclif's TypeScript source
 * lookup (tsconfig reads and ts-node probes on every start in development) is off.
 */
export async function loadCliConfig(root: string): Promise<Config> {
  settings.enableAutoTranspile = false;
  keepPluginsApart();
  return Config.load({ root });
}
