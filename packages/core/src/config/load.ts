import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { readConfigFile } from './file.js';
import type { ConfigProblem } from './problems.js';
import { resolveConfig } from './resolve.js';
import type { HeadwayConfig } from './schema.js';

/*
 * Loading the configuration: find the file, read it, then resolve it with the environment (resolve.ts). The other
 * files of this directory each hold one step; what they export for the rest of Headway is exported from here.
 */
export { ConfigError, formatProblem, type ConfigProblem } from './problems.js';
export { defaultConfig, resolveConfig } from './resolve.js';
export { envName, suggestKey } from './sources.js';
export { grpcPlaintextProblem } from './checks.js';
export { parseLetsEncryptListen } from './letsencrypt.js';
export { checkPluginEntry, checkRecord, isDomainName, isLoopbackHost, parseHostPort } from './syntax.js';

export interface LoadedConfig {
  config: HeadwayConfig;
  /** source is the file read, or null when built-in defaults are in force. */
  source: string | null;
  problems: ConfigProblem[];
}

export interface LoadOptions {
  /** path given with -c/--config; a missing file is an error, never a silent fallback. */
  path?: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  home?: string;
}

/** configSearchPath lists where a config file is looked for, in order. */
export function configSearchPath(opts: LoadOptions = {}): string[] {
  const env = opts.env ?? process.env;
  const home = opts.home ?? homedir();
  const cwd = opts.cwd ?? process.cwd();
  const list: string[] = [];
  if (opts.path) return [resolve(cwd, opts.path)];
  if (env.HEADWAY_CONFIG) return [resolve(cwd, env.HEADWAY_CONFIG)];
  list.push('/etc/headway/config.yaml', join(home, '.headway', 'config.yaml'), join(cwd, 'config.yaml'));
  return list;
}

/**
 * loadConfig finds and reads the config file, applies HEADWAY_* environment
 * overrides, fills defaults and validates; it never throws for bad content but
 * returns every problem (callers decide whether to stop).
 */
export function loadConfig(opts: LoadOptions = {}): LoadedConfig {
  const env = opts.env ?? process.env;
  const cwd = opts.cwd ?? process.cwd();
  const home = opts.home ?? homedir();
  const explicit = Boolean(opts.path || env.HEADWAY_CONFIG);
  let source: string | null = null;
  const problems: ConfigProblem[] = [];
  for (const candidate of configSearchPath(opts)) {
    if (existsSync(candidate)) { source = candidate; break; }
    if (explicit) {
      problems.push({ level: 'error', key: '', message: `config file ${candidate} does not exist` });
    }
  }
  const raw = source ? readConfigFile(source, problems) : {};
  const resolved = resolveConfig(raw, { env, baseDir: source ? dirname(source) : cwd, home });
  return { config: resolved.config, source, problems: [...problems, ...resolved.problems] };
}
