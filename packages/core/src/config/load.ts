import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { closest, distance } from 'fastest-levenshtein';
import YAML from 'yaml';
import { formatPrefix, parseIP, parsePrefix, prefixOverlaps } from '../net/ip.js';
import { formatDuration, parseDuration } from './duration.js';
import { KEYS, TIMER_MAX_MS, NOT_IMPLEMENTED_KEYS, NOT_IMPLEMENTED_PREFIXES, REMOVED, RENAMED, type KeySpec, type NotImplemented } from './keys.js';
import type { HeadwayConfig } from './schema.js';
import { PORT_SELECTION, type PortName, type PluginEntry } from '../ports/adapter.js';

/** ConfigProblem is one finding: `error` and `fatal` stop the server, `warn` does not. */
export interface ConfigProblem {
  level: 'fatal' | 'error' | 'warn';
  key: string;
  message: string;
  /**
   * code marks a kind of finding: `not_implemented` is a headscale key Headway accepts but does not act on
   * (`config check --strict` fails on it); `server_url_port` is the wrong-port warning of checkServerUrl, which
   * `headway serve` holds back until it has asked server_url whether it reaches this server.
   */
  code?: 'not_implemented' | 'server_url_port';
}

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

/** ConfigError carries every problem found, so a check can print them all at once. */
export class ConfigError extends Error {
  constructor(readonly problems: ConfigProblem[]) {
    super(problems.filter((p) => p.level !== 'warn').map(formatProblem).join('\n'));
    this.name = 'ConfigError';
  }
}

export function formatProblem(p: ConfigProblem): string {
  return p.key ? `${p.key}: ${p.message}` : p.message;
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
  let raw: unknown = {};
  const problems: ConfigProblem[] = [];
  for (const candidate of configSearchPath(opts)) {
    if (existsSync(candidate)) { source = candidate; break; }
    if (explicit) {
      problems.push({ level: 'error', key: '', message: `config file ${candidate} does not exist` });
    }
  }
  let text: string | undefined;
  if (source) {
    try {
      text = readFileSync(source, 'utf8');
    } catch (err) {
      // A directory or an unreadable file: name it (the bare "EISDIR: illegal operation on a directory" did not).
      problems.push({ level: 'error', key: '', message: `cannot read config file ${source}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` });
    }
  }
  if (source && text !== undefined && Buffer.byteLength(text) > MAX_CONFIG_BYTES) {
    problems.push({ level: 'error', key: '', message: `config file ${source} is ${Buffer.byteLength(text)} bytes; a config file may be at most ${MAX_CONFIG_BYTES} bytes` });
  } else if (source && text !== undefined) {
    raw = parseYaml(text, source, problems);
  }
  const resolved = resolveConfig(raw, { env, baseDir: source ? dirname(source) : cwd, home });
  return { config: resolved.config, source, problems: [...problems, ...resolved.problems] };
}

/** MAX_CONFIG_BYTES bounds the config file read (headscale's whole example is ~20 KB). */
const MAX_CONFIG_BYTES = 1 << 20;

/**
 * parseYaml reads the config file's YAML, adding a problem (with file:line:col where there is one) for anything
 * wrong. Duplicate keys are found here in one pass: the yaml package's uniqueKeys compares every key with every
 * other in a mapping, and a file of 20,000 keys took 5 s to parse (100,000 never finished). Merge keys (`<<: *base`)
 * are read as headscale's YAML reader does. An alias bomb or nesting too deep to convert is a problem, not a throw.
 */
function parseYaml(text: string, source: string, problems: ConfigProblem[]): unknown {
  const lines = new YAML.LineCounter();
  const at = (offset: number | undefined) => {
    if (offset === undefined) return '';
    const pos = lines.linePos(offset);
    return `:${pos.line}:${pos.col}`;
  };
  const invalid = (where: string, message: string) => problems.push({ level: 'error', key: '', message: `${source}${where}: invalid YAML: ${message}` });
  let doc: YAML.Document.Parsed;
  try {
    doc = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: false, merge: true, lineCounter: lines });
  } catch (err) {
    invalid('', tooDeep(err));
    return {};
  }
  if (doc.errors.length) {
    // The yaml package's first line ends "at line 2, column 1:" before the excerpt it prints below; the position is already in front.
    for (const e of doc.errors) invalid(at(e.pos[0]), e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '').replace(/:$/, ''));
    return {};
  }
  const before = problems.length;
  const seen = new Set<unknown>();
  const visit = (node: unknown): void => {
    // Aliases share nodes: each is checked once (an alias bomb does not multiply the walk).
    if (!node || typeof node !== 'object' || seen.has(node)) return;
    seen.add(node);
    if (YAML.isMap(node)) {
      const keys = new Set<unknown>();
      for (const pair of node.items) {
        const key = YAML.isScalar(pair.key) ? pair.key.value : pair.key;
        if (key !== '<<' && keys.has(key)) invalid(at((pair.key as YAML.Node | null)?.range?.[0]), `Map keys must be unique (${JSON.stringify(key)} again)`);
        keys.add(key);
        visit(pair.value);
      }
    } else if (YAML.isSeq(node)) for (const item of node.items) visit(item);
  };
  try {
    visit(doc.contents);
  } catch (err) {
    invalid('', tooDeep(err));
    return {};
  }
  if (problems.length > before) return {};
  // A file mode written as a YAML number keeps its digits: 0o770 is read as 504 and 0770 as 770, neither of which
  // is the mode meant (the socket was made with mode 0504 and its owner could not connect).
  const mode = doc.get('unix_socket_permission', true);
  if (YAML.isScalar(mode) && typeof mode.value === 'number' && mode.source) {
    mode.value = mode.format === 'OCT' ? `0${mode.source.slice(2)}` : mode.source;
  }
  try {
    return doc.toJS({ maxAliasCount: 1000 }) ?? {};
  } catch (err) {
    // An alias bomb ("Excessive alias count") or nesting deeper than the stack.
    invalid('', tooDeep(err));
    return {};
  }
}

/** tooDeep names a stack overflow as what it means in a config file; any other error by its first line. */
function tooDeep(err: unknown): string {
  return err instanceof RangeError ? 'nested too deeply' : String((err as Error).message).split('\n')[0]!;
}

type Flat = Map<string, { value: unknown; from: string }>;

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
    walk(raw as Record<string, unknown>, '', flat, problems, unimplemented);
  }

  for (const [key, spec] of Object.entries(KEYS)) {
    const name = envName(key);
    const text = env[name];
    if (text === undefined) continue;
    const value = parseEnv(text, spec);
    flat.set(key, { value, from: name });
  }

  problems.push(...headscaleEnvProblems(env), ...unknownEnvProblems(env));

  const values: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(KEYS)) {
    const given = flat.get(key);
    if (!given) { values[key] = spec.default; continue; }
    const label = given.from === key ? key : `${given.from} (${key})`;
    const checked = check(given.value, spec);
    if ('error' in checked) {
      problems.push({ level: 'error', key: label, message: checked.error });
      values[key] = spec.default;
    } else values[key] = checked.value;
  }

  for (const [key, spec] of Object.entries(NOT_IMPLEMENTED_KEYS)) {
    const given = flat.get(key);
    if (given && values[key] !== spec.inert) note(unimplemented, spec, given.from === key ? key : `${given.from} (${key})`);
  }
  problems.push(...unimplementedProblems(unimplemented));

  crossCheck(values, problems);
  checkServerUrl(values, problems);
  resolvePaths(values, opts.baseDir ?? process.cwd(), opts.home ?? homedir(), env);
  const socket = String(values.unix_socket ?? '');
  // sun_path holds 108 bytes with the final NUL; a longer path failed at start-up with a bare "listen EINVAL".
  if (socket && Buffer.byteLength(socket) > 107) {
    problems.push({ level: 'error', key: 'unix_socket', message: `${socket} is ${Buffer.byteLength(socket)} bytes long; a socket path may be at most 107 (set a shorter unix_socket or data_dir)` });
  }
  checkOidc(values, problems);
  return { config: nest(values) as unknown as HeadwayConfig, problems };
}

/** Unimplemented collects the not-implemented keys found, grouped by the feature they configure. */
type Unimplemented = Map<string, { spec: NotImplemented; keys: string[] }>;

function note(found: Unimplemented, spec: NotImplemented, key: string): void {
  const entry = found.get(spec.feature) ?? found.set(spec.feature, { spec, keys: [] }).get(spec.feature)!;
  entry.keys.push(key);
}

/** unimplementedFeature finds the not-implemented headscale feature a key belongs to, if any. */
function unimplementedFeature(key: string): NotImplemented | undefined {
  for (const [p, spec] of Object.entries(NOT_IMPLEMENTED_PREFIXES)) {
    if (key === p || key.startsWith(p.endsWith('_') ? p : `${p}.`)) return spec;
  }
  return undefined;
}

/** unimplementedProblems turns each feature found into one warning naming every key of it that was set. */
function unimplementedProblems(found: Unimplemented): ConfigProblem[] {
  return [...found.values()].map(({ spec, keys }) => ({
    level: 'warn' as const,
    key: keys.join(', '),
    message: `accepted for headscale compatibility but not implemented: ${spec.feature} (${keys.length === 1 ? 'this key is' : 'these keys are'} ignored); ${spec.instead}`,
    code: 'not_implemented' as const,
  }));
}

function walk(obj: Record<string, unknown>, prefix: string, flat: Flat, problems: ConfigProblem[], unimplemented: Unimplemented): void {
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? `${prefix}.${k}` : k;
    // Own keys only: `__proto__`, `toString` and the like are unknown keys, not inherited ones.
    if (Object.hasOwn(KEYS, key)) {
      const renamed = flat.get(key);
      if (renamed) problems.push({ level: 'error', key, message: `set twice: also as ${renamed.from}, its old name; keep one` });
      flat.set(key, { value: v, from: key });
      continue;
    }
    if (Object.hasOwn(REMOVED, key)) {
      if (key === 'dns_config' && v && typeof v === 'object') {
        const children = Object.keys(v);
        for (const c of children) {
          const sub = `dns_config.${c}`;
          problems.push({ level: 'fatal', key: sub, message: `removed: ${REMOVED[sub] ?? REMOVED.dns_config}` });
        }
        if (children.length) continue;
      }
      problems.push({ level: 'fatal', key, message: `removed: ${REMOVED[key]}` });
      continue;
    }
    if (Object.hasOwn(RENAMED, key)) {
      const to = RENAMED[key]!;
      if (flat.has(to)) {
        problems.push({ level: 'error', key, message: `set twice: also as ${to}, its new name; keep one` });
        continue;
      }
      problems.push({ level: 'warn', key, message: `renamed to \`${to}\`; the old key still works but will be removed` });
      flat.set(to, { value: v, from: key });
      continue;
    }
    const isParent = Object.keys(KEYS).some((known) => known.startsWith(key + '.'))
      || Object.keys(REMOVED).some((r) => r.startsWith(key + '.'));
    if (isParent && v !== null && typeof v === 'object' && !Array.isArray(v)) {
      walk(v as Record<string, unknown>, key, flat, problems, unimplemented);
      continue;
    }
    if (isParent && v !== null) {
      problems.push({ level: 'error', key, message: `expected a mapping of keys, found ${describe(v)}` });
      continue;
    }
    const feature = unimplementedFeature(key);
    if (feature) {
      // An `oidc:` block is named key by key (oidc.issuer, oidc.client_id, ...), not as one mapping.
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
        for (const child of Object.keys(v)) note(unimplemented, feature, `${key}.${child}`);
      } else note(unimplemented, feature, key);
      continue;
    }
    const hint = suggestKey(key);
    problems.push({ level: 'warn', key, message: `unknown key (ignored)${hint ? `; did you mean \`${hint}\`?` : ''}` });
  }
}

/**
 * suggestKey names the known key nearest to a misspelt one (`metrics_listen_adr` →
 * `metrics_listen_addr`), so an unknown-key warning says what was probably meant;
 * nothing when no key is within a third of the name's length.
 */
export function suggestKey(key: string): string | undefined {
  // A key is compared with the known keys and sections at its own depth: `polcy` with `policy`, not `policy.mode`.
  const depth = key.split('.').length;
  const known = new Set<string>();
  for (const k of [...Object.keys(KEYS), ...Object.values(RENAMED)]) {
    const parts = k.split('.');
    if (parts.length >= depth) known.add(parts.slice(0, depth).join('.'));
  }
  return known.size ? nearest(key, [...known], key.length) : undefined;
}

/** nearest is the candidate closest to name when it is within a third of `length` edits (at least 2), else undefined. */
function nearest(name: string, candidates: string[], length: number): string | undefined {
  const best = closest(name, candidates);
  return distance(name, best) <= Math.max(2, Math.floor(length / 3)) ? best : undefined;
}

/** OTHER_VARIABLES are HEADWAY_* variables that name no key but that the CLI, the scripts or the tests read. */
const OTHER_VARIABLES = new Set(['HEADWAY_CONFIG', 'HEADWAY_NODE_HOME', 'HEADWAY_CI_WORK', 'HEADWAY_CHILD_CONFIG', 'HEADWAY_LOAD_RECORD', 'HEADWAY_CONTAINER_CACHE', 'HEADWAY_BASE_IMAGE']);

/**
 * unknownEnvProblems warns about each HEADWAY_* variable that names no key (`HEADWAY_LISTEN_ADR`), with the
 * nearest variable that does: a misspelt variable is otherwise ignored without a word.
 */
function unknownEnvProblems(env: NodeJS.ProcessEnv): ConfigProblem[] {
  const names = Object.keys(KEYS).map(envName);
  const known = new Set(names);
  const problems: ConfigProblem[] = [];
  for (const name of Object.keys(env)) {
    if (!name.startsWith('HEADWAY_') || known.has(name) || OTHER_VARIABLES.has(name) || name.startsWith('HEADWAY_TEST_')) continue;
    const best = nearest(name, names, name.length - 'HEADWAY_'.length);
    const hint = best ? `; did you mean ${best}?` : '';
    problems.push({ level: 'warn', key: name, message: `this environment variable names no configuration key (ignored)${hint}` });
  }
  return problems;
}

export function envName(key: string): string {
  return 'HEADWAY_' + key.toUpperCase().replace(/\./g, '_');
}

/**
 * headscaleEnvProblems warns about each HEADSCALE_<KEY> variable naming a key Headway has:
 * headscale reads those, Headway reads HEADWAY_<KEY>, and a container environment carried
 * over from headscale would otherwise be ignored without a word.
 */
function headscaleEnvProblems(env: NodeJS.ProcessEnv): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const key of Object.keys(KEYS)) {
    const ours = envName(key);
    const theirs = 'HEADSCALE_' + ours.slice('HEADWAY_'.length);
    if (env[theirs] !== undefined) {
      problems.push({ level: 'warn', key: theirs, message: `ignored: Headway reads ${ours} (the \`${key}\` key)${env[ours] === undefined ? `; rename the variable` : ''}` });
    }
  }
  return problems;
}

function parseEnv(text: string, spec: KeySpec): unknown {
  switch (spec.kind) {
    case 'bool': return /^(true|1|yes|on)$/i.test(text) ? true : /^(false|0|no|off)$/i.test(text) ? false : text;
    case 'int': return /^-?\d+$/.test(text.trim()) ? Number(text) : text;
    case 'strings':
      if (text.trim().startsWith('[')) { try { return JSON.parse(text); } catch { return text; } }
      return text.split(',').map((s) => s.trim()).filter(Boolean);
    case 'split': case 'records': case 'params':
      try { return JSON.parse(text); } catch { return text; }
    case 'plugins':
      if (text.trim().startsWith('[')) { try { return JSON.parse(text); } catch { return text; } }
      return text.split(',').map((s) => s.trim()).filter(Boolean);
    case 'ssl': return /^(true|false)$/i.test(text) ? text.toLowerCase() === 'true' : text;
    default: return text;
  }
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  // JSON.stringify writes NaN and Infinity (.nan, .inf in YAML) as null.
  return typeof v === 'number' ? `number ${String(v)}` : `${typeof v} ${JSON.stringify(v)}`;
}

type Checked = { value: unknown } | { error: string };

function check(v: unknown, spec: KeySpec): Checked {
  if (v === null || v === undefined) return { value: spec.default };
  const found = describe(v);
  switch (spec.kind) {
    case 'string': case 'path':
      if (typeof v === 'number') return { value: String(v) };
      if (typeof v !== 'string') return { error: `expected a string, found ${found}` };
      if (!v && !spec.empty) return { error: 'must not be empty' };
      return { value: v };
    case 'bool':
      return typeof v === 'boolean' ? { value: v } : { error: `expected true or false, found ${found}` };
    case 'int': {
      if (typeof v !== 'number' || !Number.isInteger(v)) return { error: `expected a whole number, found ${found}` };
      if (spec.min !== undefined && v < spec.min) return { error: `must be at least ${spec.min}, found ${v}` };
      if (spec.max !== undefined && v > spec.max) return { error: `must be at most ${spec.max}, found ${v}` };
      return { value: v };
    }
    case 'duration': {
      if (v === 0) return { value: 0 };
      const ms = typeof v === 'string' ? parseDuration(v) : undefined;
      if (ms === undefined) return { error: `expected a duration such as 30m, 24h or 90d, found ${found}` };
      const max = spec.max ?? TIMER_MAX_MS;
      if (ms > max) return { error: `must be at most ${formatDuration(max)}, found ${v}` };
      if (ms !== 0 && spec.min !== undefined && ms < spec.min) return { error: `must be at least ${formatDuration(spec.min)}, found ${v}` };
      return { value: ms };
    }
    case 'strings':
      if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) return { error: `expected a list of strings, found ${found}` };
      return { value: v };
    case 'cidr': {
      if (typeof v !== 'string') return { error: `expected a CIDR prefix such as 100.64.0.0/10, found ${found}` };
      if (v === '' && spec.empty) return { value: '' };
      if (!v.includes('/') || !parsePrefix(v)) return { error: `expected a CIDR prefix such as 100.64.0.0/10, found ${found}` };
      return { value: v };
    }
    case 'addr': {
      if (typeof v !== 'string') return { error: `expected host:port, found ${found}` };
      if (v === '' && spec.empty) return { value: '' };
      return parseHostPort(v) ? { value: v } : { error: `expected host:port (e.g. 127.0.0.1:8080 or [::1]:8080), found ${found}` };
    }
    case 'url': {
      if (typeof v !== 'string') return { error: `expected an http:// or https:// URL, found ${found}` };
      let u: URL;
      try {
        u = new URL(v);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
      } catch { return { error: `expected an http:// or https:// URL, found ${found}` }; }
      // Devices are sent this URL with paths after it (AuthURL): a password would reach every device.
      if (u.username || u.password) return { error: 'must not hold a user name or password (every device is sent this URL)' };
      if (u.search || u.hash || v.includes('?') || v.includes('#')) return { error: `must not have a query (?...) or fragment (#...): devices are sent it with paths after it, found ${found}` };
      return { value: v.replace(/\/+$/, '') };
    }
    case 'enum':
      return typeof v === 'string' && spec.values!.includes(v)
        ? { value: v } : { error: `expected one of ${spec.values!.join(', ')}, found ${found}` };
    case 'split': {
      if (typeof v !== 'object' || Array.isArray(v)) return { error: `expected a mapping of domain to a list of nameservers, found ${found}` };
      for (const [d, list] of Object.entries(v as object)) {
        if (!isDomainName(d)) return { error: `expected a domain name such as corp.example.com as each key, found ${JSON.stringify(d)}` };
        if (!Array.isArray(list) || list.some((s) => typeof s !== 'string' || !parseIP(s))) {
          return { error: `${d}: expected a list of nameserver IP addresses, found ${describe(list)}` };
        }
      }
      return { value: v };
    }
    case 'params': {
      if (typeof v !== 'object' || Array.isArray(v)) return { error: `expected a mapping of parameter name to value, found ${found}` };
      const out: Record<string, string> = {};
      for (const [k, x] of Object.entries(v as object)) {
        if (typeof x !== 'string' && typeof x !== 'number' && typeof x !== 'boolean') return { error: `${k}: expected a string value, found ${describe(x)}` };
        out[k] = String(x);
      }
      return { value: out };
    }
    case 'records': {
      if (!Array.isArray(v)) return { error: `expected a list of {name, type, value} records, found ${found}` };
      for (const [i, r] of v.entries()) {
        const err = checkRecord(r);
        if (err) return { error: `record ${i + 1}: ${err}` };
      }
      return { value: v };
    }
    case 'filemode': {
      const s = typeof v === 'number' ? String(v) : v;
      return typeof s === 'string' && /^0?[0-7]{3}$/.test(s) ? { value: s.padStart(4, '0') } : { error: `expected an octal file mode such as "0770", found ${found}` };
    }
    case 'plugins': {
      if (!Array.isArray(v)) return { error: `expected a list of {package, port, options} entries, found ${found}` };
      const entries: PluginEntry[] = [];
      const errors: string[] = [];
      for (const [i, item] of v.entries()) {
        const checked = checkPluginEntry(item);
        if (typeof checked === 'string') errors.push(`plugins[${i}]: ${checked}`);
        else entries.push(checked);
      }
      return errors.length ? { error: errors.join('; ') } : { value: entries };
    }
    case 'ssl':
      return typeof v === 'boolean' || (typeof v === 'string' && ['disable', 'require', 'verify-ca', 'verify-full', 'true', 'false'].includes(v))
        ? { value: v === 'true' ? true : v === 'false' ? false : v }
        : { error: `expected true, false, or one of disable, require, verify-ca, verify-full, found ${found}` };
  }
}

/**
 * isDomainName: labels of letters, digits, '-' (not at either end) and '_', 1-63 characters each, 253 in all, an
 * optional final dot, and a last label that is not all digits (that is an IP address, not a name).
 */
export function isDomainName(s: string): boolean {
  const name = s.endsWith('.') ? s.slice(0, -1) : s;
  if (!name || name.length > 253) return false;
  const labels = name.split('.');
  return labels.every((l) => /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/i.test(l)) && !/^\d+$/.test(labels.at(-1)!);
}

/** checkRecord validates one DNS extra record; shared with the extra_records_path watcher. */
export function checkRecord(r: unknown): string | undefined {
  if (!r || typeof r !== 'object') return `expected {name, type, value}, found ${describe(r)}`;
  const { name, type, value } = r as Record<string, unknown>;
  if (typeof name !== 'string' || !name) return 'name must be a non-empty string';
  if (!isDomainName(name)) return `name must be a DNS name such as grafana.example.com, found ${JSON.stringify(name)}`;
  if (type !== 'A' && type !== 'AAAA') return `type must be A or AAAA, found ${JSON.stringify(type)}`;
  const ip = typeof value === 'string' ? parseIP(value) : undefined;
  if (!ip || (type === 'A') !== (ip.family === 4)) return `value must be an IPv${type === 'A' ? 4 : 6} address, found ${JSON.stringify(value)}`;
  return undefined;
}

const PACKAGE_NAME = /^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/;

/**
 * checkPluginEntry normalizes one `plugins:` item to {package, port, options}. A
 * bare package name is the DNS port with no options (what the key meant before
 * entries had ports). Storage and policy are refused here, naming the key that
 * chooses them, because a second source for a one-adapter port would be ambiguous.
 * The options themselves are the plugin's to check (kernel/loader.ts).
 */
export function checkPluginEntry(item: unknown): PluginEntry | string {
  if (typeof item === 'string') item = { package: item, port: 'dns' };
  if (!item || typeof item !== 'object' || Array.isArray(item)) return `expected {package, port, options}, found ${describe(item)}`;
  const { package: pkg, port, options, ...rest } = item as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length) return `unknown field ${unknown.map((k) => JSON.stringify(k)).join(', ')} (expected package, port, options)`;
  if (typeof pkg !== 'string' || !PACKAGE_NAME.test(pkg)) {
    return pkg === undefined ? 'package is required (an npm package name)' : `package: expected an npm package name, found ${describe(pkg)}`;
  }
  if (typeof port !== 'string' || !(port in PORT_SELECTION)) {
    const ports = Object.entries(PORT_SELECTION).filter(([, s]) => s.by === 'plugins').map(([p]) => p).join(', ');
    return port === undefined ? `${pkg}: port is required (one of ${ports})` : `${pkg}: port: expected one of ${ports}, found ${describe(port)}`;
  }
  const selection = PORT_SELECTION[port as PortName];
  if (selection.by === 'config') {
    return `${pkg}: the ${port} port is not loaded from plugins: it has exactly one adapter, chosen by ${selection.key} (set ${selection.key}: ${pkg})`;
  }
  if (selection.by === 'none') return `${pkg}: ${selection.reason}`;
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    return `${pkg}: options: expected a mapping of the plugin's options, found ${describe(options)}`;
  }
  return { package: pkg, port: port as PortName, options: (options ?? {}) as Record<string, unknown> };
}

export function parseHostPort(v: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(v);
  if (!m) return undefined;
  const port = Number(m[3]);
  if (port > 65535) return undefined;
  const host = m[1] ?? m[2] ?? '';
  if (m[1] && !parseIP(m[1])) return undefined;
  return { host: host || '0.0.0.0', port };
}

/** isLoopbackHost: 127.0.0.0/8, ::1 and localhost never leave the machine. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h === '::1') return true;
  const ip = parseIP(h);
  return ip?.family === 4 && h.startsWith('127.');
}

/**
 * grpcPlaintextProblem says why grpc_listen_addr may not serve plaintext: API keys
 * would cross the network in the clear. Plaintext is fine on a loopback address or
 * when grpc_allow_insecure says so (TLS terminated in front, a trusted network);
 * with tls_cert_path set the listener uses TLS and there is no problem.
 */
export function grpcPlaintextProblem(values: { grpc_listen_addr: string; grpc_allow_insecure: boolean; tls_cert_path: string }): string | undefined {
  const addr = values.grpc_listen_addr;
  if (!addr || values.tls_cert_path || values.grpc_allow_insecure) return undefined;
  const hp = parseHostPort(addr);
  if (!hp || isLoopbackHost(hp.host)) return undefined;
  return `${addr} is not a loopback address and no TLS is configured: gRPC would carry API keys in the clear. `
    + 'Set tls_cert_path and tls_key_path, set grpc_allow_insecure: true (TLS terminated in front of Headway), '
    + 'or listen on 127.0.0.1; an empty grpc_listen_addr turns the gRPC API off';
}

function crossCheck(values: Record<string, unknown>, problems: ConfigProblem[]): void {
  const err = (key: string, message: string) => problems.push({ level: 'error', key, message });
  if (values['dns.magic_dns'] && !values['dns.base_domain']) {
    err('dns.base_domain', 'must be set when dns.magic_dns is true');
  }
  const base = String(values['dns.base_domain'] ?? '');
  if (base && (!/^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i.test(base) || !isDomainName(base))) {
    err('dns.base_domain', `expected a domain name such as example.net, found ${JSON.stringify(base)}`);
  }
  try {
    const host = new URL(String(values.server_url)).hostname.toLowerCase();
    if (base && (host === base.toLowerCase() || host.endsWith('.' + base.toLowerCase()))) {
      err('dns.base_domain', `server_url host ${host} must not be inside the MagicDNS domain ${base}: devices would resolve the server through MagicDNS`);
    }
  } catch { /* server_url already reported */ }
  if ((values['dns.extra_records'] as unknown[]).length && values['dns.extra_records_path']) {
    err('dns.extra_records', 'cannot be used together with dns.extra_records_path; keep one');
  }
  if (Boolean(values.tls_cert_path) !== Boolean(values.tls_key_path)) {
    err(values.tls_cert_path ? 'tls_key_path' : 'tls_cert_path', 'tls_cert_path and tls_key_path must be set together');
  }
  const grpc = grpcPlaintextProblem({
    grpc_listen_addr: String(values.grpc_listen_addr ?? ''), grpc_allow_insecure: Boolean(values.grpc_allow_insecure), tls_cert_path: String(values.tls_cert_path ?? ''),
  });
  if (grpc) err('grpc_listen_addr', grpc);
  const v4 = values['prefixes.v4'] as string, v6 = values['prefixes.v6'] as string;
  if (!v4 && !v6) err('prefixes', 'at least one of prefixes.v4 and prefixes.v6 must be set');
  if (v4 && parsePrefix(v4)?.family !== 4) err('prefixes.v4', `expected an IPv4 prefix, found ${JSON.stringify(v4)}`);
  else if (v4) checkNodePrefix('prefixes.v4', v4, problems);
  if (v6 && parsePrefix(v6)?.family !== 6) err('prefixes.v6', `expected an IPv6 prefix, found ${JSON.stringify(v6)}`);
  else if (v6) checkNodePrefix('prefixes.v6', v6, problems);
  for (const ns of values['dns.nameservers.global'] as string[]) {
    if (!parseIP(ns) && !isDohUrl(ns)) err('dns.nameservers.global', `expected nameserver IP addresses or https:// DoH URLs, found ${JSON.stringify(ns)}`);
  }
  for (const d of values['dns.search_domains'] as string[]) {
    if (!isDomainName(d)) err('dns.search_domains', `expected domain names such as corp.example.com, found ${JSON.stringify(d)}`);
  }
  for (const [key, family] of [['derp.server.ipv4', 4], ['derp.server.ipv6', 6]] as const) {
    const ip = String(values[key] ?? '');
    if (ip && parseIP(ip)?.family !== family) err(key, `expected an IPv${family} address, found ${JSON.stringify(ip)}`);
  }
  for (const u of values['derp.urls'] as string[]) {
    if (!/^https?:\/\/[^\s/?#]+/i.test(u) || !URL.canParse(u)) err('derp.urls', `expected http:// or https:// URLs of DERP maps, found ${JSON.stringify(u)}`);
  }
  const dbType = String(values['database.type']);
  if (dbType === 'postgres' || dbType === 'mysql') {
    const host = String(values[`database.${dbType}.host`] ?? '');
    // A connection URL pasted here (often with its password) would be echoed back by the driver's errors.
    if (/:\/\/|@|\s/.test(host)) err(`database.${dbType}.host`, 'expected a host name, an IP address or a socket directory, found a connection URL or user@host (set host, port, name, user and pass apart)');
  }
  if (values['cluster.enabled'] && String(values['database.type']) === 'sqlite') {
    err('cluster.enabled', 'needs database.type postgres or mysql: several instances cannot share one SQLite file');
  }
  if (values['cluster.enabled']) {
    const beat = Number(values['cluster.heartbeat_interval']), timeout = Number(values['cluster.instance_timeout']);
    if (beat <= 0) err('cluster.heartbeat_interval', 'must be longer than 0');
    if (timeout < 2 * beat) err('cluster.instance_timeout', `must be at least twice cluster.heartbeat_interval (${beat} ms), found ${timeout} ms`);
    if (Number(values['cluster.poll_interval']) <= 0) err('cluster.poll_interval', 'must be longer than 0');
  }
  for (const key of ['database.type', 'policy.mode'] as const) {
    const id = String(values[key]);
    if (!PACKAGE_NAME.test(id)) {
      err(key, `expected an adapter id or npm package name, found ${JSON.stringify(id)}`);
    }
  }
}

/** isDohUrl: an https:// URL with a host (DNS over HTTPS), nothing else. */
function isDohUrl(s: string): boolean {
  if (!/^https:\/\/[^\s]+$/i.test(s)) return false;
  try { return new URL(s).hostname !== ''; } catch { return false; }
}

/** Ranges no node address may come from: devices treat them as something else (or refuse them). */
const SPECIAL_RANGES: { prefix: string; what: string }[] = [
  { prefix: '0.0.0.0/8', what: '"this network"' }, { prefix: '127.0.0.0/8', what: 'loopback' },
  { prefix: '169.254.0.0/16', what: 'link-local' }, { prefix: '224.0.0.0/3', what: 'multicast and reserved' },
  { prefix: '::/8', what: 'unspecified, loopback and IPv4-mapped' }, { prefix: 'fe80::/10', what: 'link-local' },
  { prefix: 'ff00::/8', what: 'multicast' },
];
const TAILSCALE_RANGES = { 4: '100.64.0.0/10', 6: 'fd7a:115c:a1e0::/48' } as const;

/**
 * checkNodePrefix: a prefix nodes get addresses from must be written without host bits, hold at least one address
 * to give (the allocator never gives a prefix's first and last), and stay out of SPECIAL_RANGES; outside
 * Tailscale's own ranges it is a warning, as headscale gives.
 */
function checkNodePrefix(key: string, text: string, problems: ConfigProblem[]): void {
  const p = parsePrefix(text)!;
  const width = p.family === 4 ? 32 : 128;
  if (parseIP(text.split('/')[0]!)!.value !== p.base) {
    problems.push({ level: 'error', key, message: `${text} has host bits set; did you mean ${formatPrefix(p)}?` });
    return;
  }
  if (p.bits > width - 2) {
    problems.push({ level: 'error', key, message: `${text} holds no address to give a node (a prefix's first and last addresses are never given); use /${width - 2} or shorter` });
    return;
  }
  for (const r of SPECIAL_RANGES) {
    const q = parsePrefix(r.prefix)!;
    if (prefixOverlaps(p, q)) {
      problems.push({ level: 'error', key, message: `${text} overlaps ${r.prefix} (${r.what}): devices cannot use addresses there` });
      return;
    }
  }
  const ts = parsePrefix(TAILSCALE_RANGES[p.family])!;
  if (!(prefixOverlaps(p, ts) && p.bits >= ts.bits)) {
    problems.push({ level: 'warn', key, message: `${text} is outside ${TAILSCALE_RANGES[p.family]}, the range Tailscale clients expect tailnet addresses in: some client features may not work` });
  }
}

/** OIDC_RESERVED_PARAMS are set by the code flow itself; oidc.extra_params must not override them. */
const OIDC_RESERVED_PARAMS = ['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'nonce', 'code_challenge', 'code_challenge_method'];

/** checkOidc validates the oidc block when oidc.issuer turns it on, as headscale does. */
function checkOidc(values: Record<string, unknown>, problems: ConfigProblem[]): void {
  const err = (key: string, message: string) => problems.push({ level: 'error', key, message });
  const issuer = String(values['oidc.issuer'] ?? '');
  if (!issuer) return;
  try {
    const u = new URL(issuer);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
    if (u.protocol === 'http:' && !LOOPBACK_HOSTS.test(u.hostname)) {
      problems.push({ level: 'warn', key: 'oidc.issuer', message: `${issuer} is plain http: the provider's answers (tokens, keys) can be read and changed on the way; use https` });
    }
  } catch {
    err('oidc.issuer', `expected an http:// or https:// URL, found ${JSON.stringify(issuer)}`);
  }
  if (!values['oidc.client_id']) err('oidc.client_id', 'is required when oidc.issuer is set');
  if (values['oidc.client_secret'] && values['oidc.client_secret_path']) {
    err('oidc.client_secret', 'oidc.client_secret and oidc.client_secret_path are mutually exclusive; keep one');
  } else if (!values['oidc.client_secret'] && !values['oidc.client_secret_path']) {
    err('oidc.client_secret', 'oidc.client_secret or oidc.client_secret_path is required when oidc.issuer is set');
  }
  const secretPath = String(values['oidc.client_secret_path'] ?? '');
  if (secretPath && !existsSync(secretPath)) err('oidc.client_secret_path', `${secretPath} does not exist`);
  if (!(values['oidc.scope'] as string[]).includes('openid')) err('oidc.scope', 'must include openid');
  for (const k of Object.keys(values['oidc.extra_params'] as Record<string, string>)) {
    if (OIDC_RESERVED_PARAMS.includes(k)) err('oidc.extra_params', `${k} is set by the login flow itself and cannot be overridden`);
  }
}

const LOOPBACK_HOSTS = /^(localhost|127(\.\d{1,3}){3}|\[?::1\]?|0\.0\.0\.0|\[?::\]?)$/i;

/**
 * checkServerUrl warns when server_url names this machine (a loopback address or
 * listen_addr's own host) on a port other than listen_addr's: after changing
 * listen_addr alone, devices would still be sent to the old port. The config alone
 * cannot tell that from a proxy or balancer on this machine forwarding to listen_addr,
 * so the warning is marked (`server_url_port`) for `headway serve` to drop once
 * server_url answers as the running server. Cluster instances are not warned: several
 * behind a balancer's port is what cluster mode is for.
 */
function checkServerUrl(values: Record<string, unknown>, problems: ConfigProblem[]): void {
  if (values['cluster.enabled']) return;
  let url: URL;
  try { url = new URL(String(values.server_url)); } catch { return; }
  const listen = parseHostPort(String(values.listen_addr));
  if (!listen || listen.port === 0) return;
  const host = url.hostname.toLowerCase();
  const listenHost = listen.host.toLowerCase().replace(/^\[|\]$/g, '');
  if (!LOOPBACK_HOSTS.test(host) && host.replace(/^\[|\]$/g, '') !== listenHost) return;
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
  if (port === listen.port) return;
  const fixed = new URL(url.href);
  fixed.port = String(listen.port);
  problems.push({
    level: 'warn', key: 'server_url', code: 'server_url_port',
    message: `${values.server_url} points at port ${port} of this machine but listen_addr is ${values.listen_addr}: devices would be sent to the wrong port; set server_url: ${fixed.href.replace(/\/$/, '')} (or the public URL of a proxy in front of Headway)`,
  });
}

const DATA_DIR_KEYS = ['noise.private_key_path', 'derp.server.private_key_path', 'database.sqlite.path', 'unix_socket'];
const FILE_KEYS = ['policy.path', 'tls_cert_path', 'tls_key_path', 'dns.extra_records_path', 'oidc.client_secret_path'];

function resolvePaths(values: Record<string, unknown>, baseDir: string, home: string, env: NodeJS.ProcessEnv): void {
  const expand = (p: string) => (p.startsWith('~/') ? join(home, p.slice(2)) : p);
  const dataDefault = join(env.XDG_DATA_HOME || join(home, '.local', 'share'), 'headway');
  const dataDir = values.data_dir ? resolve(baseDir, expand(String(values.data_dir))) : dataDefault;
  values.data_dir = dataDir;
  for (const k of DATA_DIR_KEYS) {
    const p = expand(String(values[k]));
    if (p && p !== ':memory:' && !isAbsolute(p)) values[k] = join(dataDir, p);
  }
  // The secret's path may name a variable, as headscale's does (systemd's ${CREDENTIALS_DIRECTORY}).
  values['oidc.client_secret_path'] = String(values['oidc.client_secret_path']).replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a?: string, b?: string) => env[(a ?? b)!] ?? '');
  for (const k of FILE_KEYS) {
    const p = expand(String(values[k]));
    if (p && !isAbsolute(p)) values[k] = resolve(baseDir, p);
  }
  values['derp.paths'] = (values['derp.paths'] as string[]).map((p) => resolve(baseDir, expand(p)));
}

function nest(values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(values)) {
    const parts = key.split('.');
    let o = out;
    for (const p of parts.slice(0, -1)) o = (o[p] ??= {}) as Record<string, unknown>;
    o[parts.at(-1)!] = v;
  }
  return out;
}

/** defaultConfig is the built-in configuration (what a server with no file runs on). */
export function defaultConfig(overrides: { env?: NodeJS.ProcessEnv; home?: string } = {}): HeadwayConfig {
  return resolveConfig({}, { env: overrides.env ?? {}, home: overrides.home }).config;
}
