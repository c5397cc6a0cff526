import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { checkOidc, checkServerUrl, crossCheck } from './checks.js';
import { checkLetsEncrypt } from './letsencrypt.js';
import { headscaleDefaultProblems, headscaleMarker, NOT_IMPLEMENTED_KEYS, note, unimplementedProblems, type Unimplemented } from './headscale.js';
import { CONFIG_KEYS, isConfigKey, KEYS, type ConfigKey, type ConfigValues } from './keys.js';
import type { ConfigProblem } from './problems.js';
import type { HeadwayConfig, Nested } from './schema.js';
import { flatten, headscaleEnvProblems, readEnv, unknownEnvProblems, type Flat, type Given } from './sources.js';

/** resolveConfig turns a parsed YAML object plus environment into a validated config. */
export function resolveConfig(
  raw: unknown,
  opts: { env?: NodeJS.ProcessEnv; baseDir?: string; home?: string } = {},
): { config: HeadwayConfig; problems: ConfigProblem[] } {
  const env = opts.env ?? {};
  const problems: ConfigProblem[] = [];
  const flat: Flat = new Map();
  const unimplemented: Unimplemented = new Map();

  if (raw !== null && (typeof raw !== 'object' || Array.isArray(raw))) {
    problems.push({ level: 'error', key: '', message: 'the config file must be a YAML mapping of keys' });
  } else if (raw) {
    flatten(raw as Record<string, unknown>, '', flat, problems, unimplemented);
  }
  readEnv(env, flat);
  problems.push(...headscaleEnvProblems(env), ...unknownEnvProblems(env));

  // Every key is set here, each by its own descriptor's check (Object.fromEntries cannot say so in its type).
  const values = Object.fromEntries(CONFIG_KEYS.map((key) => [key, value(key, flat.get(key), problems)])) as ConfigValues;

  for (const [key, spec] of Object.entries(NOT_IMPLEMENTED_KEYS)) {
    if (!isConfigKey(key)) continue;
    const given = flat.get(key);
    if (given && values[key] !== spec.inert) note(unimplemented, spec, label(key, given));
  }
  problems.push(...unimplementedProblems(unimplemented));
  const marker = raw && typeof raw === 'object' && !Array.isArray(raw) ? headscaleMarker(dottedKeys(raw as Record<string, unknown>), flat) : undefined;
  problems.push(...headscaleDefaultProblems(marker, (k) => flat.has(k), values));

  crossCheck(values, problems);
  checkServerUrl(values, problems);
  checkLetsEncrypt(values, problems);
  resolvePaths(values, opts.baseDir ?? process.cwd(), opts.home ?? homedir(), env);
  const socket = values.unix_socket;
  // sun_path holds 108 bytes with the final NUL: a longer path would fail at start-up with a bare "listen EINVAL".
  if (socket && Buffer.byteLength(socket) > 107) {
    problems.push({ level: 'error', key: 'unix_socket', message: `${socket} is ${Buffer.byteLength(socket)} bytes long; a socket path may be at most 107 (set a shorter unix_socket or data_dir)` });
  }
  checkOidc(values, problems);
  return { config: nest(values), problems };
}

/** dottedKeys lists every key a YAML mapping sets, nested ones by dotted name (`dns`, `dns.magic_dns`, ...). */
function dottedKeys(obj: Record<string, unknown>, prefix = ''): string[] {
  return Object.entries(obj).flatMap(([k, v]) => {
    const key = prefix ? `${prefix}.${k}` : k;
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? [key, ...dottedKeys(v as Record<string, unknown>, key)] : [key];
  });
}

/** label names a key as given: `key`, or `HEADWAY_KEY (key)` and `old_name (key)` when it came from elsewhere. */
function label(key: ConfigKey, given: Given): string {
  return given.from === key ? key : `${given.from} (${key})`;
}

/** value is a key's value: as given when it passes the key's check, else (with a problem) the default. */
function value<N extends ConfigKey>(key: N, given: Given | undefined, problems: ConfigProblem[]): ConfigValues[N] {
  const spec = KEYS[key];
  if (!given || given.value === null || given.value === undefined) return spec.default;
  const checked = spec.check(given.value);
  if ('value' in checked) return checked.value;
  problems.push({ level: 'error', key: label(key, given), message: checked.error });
  return spec.default;
}

/** DATA_DIR_KEYS are paths relative to data_dir; FILE_KEYS are relative to the config file's directory. */
const DATA_DIR_KEYS = ['noise.private_key_path', 'derp.server.private_key_path', 'database.sqlite.path', 'unix_socket', 'tls_letsencrypt_cache_dir'] as const;
const FILE_KEYS = ['policy.path', 'tls_cert_path', 'tls_key_path', 'dns.extra_records_path', 'oidc.client_secret_path'] as const;

function resolvePaths(values: ConfigValues, baseDir: string, home: string, env: NodeJS.ProcessEnv): void {
  const expand = (p: string) => (p.startsWith('~/') ? join(home, p.slice(2)) : p);
  const dataDefault = join(env.XDG_DATA_HOME || join(home, '.local', 'share'), 'headway');
  const dataDir = values.data_dir ? resolve(baseDir, expand(values.data_dir)) : dataDefault;
  values.data_dir = dataDir;
  for (const k of DATA_DIR_KEYS) {
    const p = expand(values[k]);
    if (p && p !== ':memory:' && !isAbsolute(p)) values[k] = join(dataDir, p);
  }
  // The secret's path may name a variable, as headscale's does (systemd's ${CREDENTIALS_DIRECTORY}).
  values['oidc.client_secret_path'] = values['oidc.client_secret_path'].replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a?: string, b?: string) => env[(a ?? b)!] ?? '');
  for (const k of FILE_KEYS) {
    const p = expand(values[k]);
    if (p && !isAbsolute(p)) values[k] = resolve(baseDir, p);
  }
  values['derp.paths'] = values['derp.paths'].map((p) => resolve(baseDir, expand(p)));
}

/** nest turns dotted keys into nested objects: { 'a.b': 1 } becomes { a: { b: 1 } }. */
function nest<T extends object>(values: T): Nested<T> {
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(values)) {
    const parts = key.split('.');
    let o = out;
    for (const p of parts.slice(0, -1)) o = (o[p] ??= {}) as Record<string, unknown>;
    o[parts.at(-1)!] = v;
  }
  // Nested<T> is this same split done on the type; TypeScript cannot follow it through a loop.
  return out as Nested<T>;
}

/** defaultConfig is the built-in configuration (what a server with no file runs on). */
export function defaultConfig(overrides: { env?: NodeJS.ProcessEnv; home?: string } = {}): HeadwayConfig {
  return resolveConfig({}, { env: overrides.env ?? {}, home: overrides.home }).config;
}
