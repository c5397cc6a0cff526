import { parseIPPrefix, parseIP } from '@headway/policy/ip';
import type { PluginEntry } from '../ports/adapter.js';
import { formatDuration, parseDuration } from './duration.js';
import { parseTrustedProxy } from '../client-address.js';
import { checkPluginEntry, checkRecord, describe, isDomainName, parseHostPort, splitProblem, type ExtraRecord } from './syntax.js';

/*
 * The kinds of configuration key. Each constructor below makes a key's descriptor, a KeySpec<T> whose T is the
 * type of the key's value: the default must be a T, check turns what YAML or the environment gave into a T, and
 * the configuration's TypeScript type is read off the descriptors (keys.ts, schema.ts).
 */

export type KeyKind =
  | 'string' | 'bool' | 'int' | 'duration' | 'strings' | 'cidr' | 'addr' | 'url' | 'path'
  | 'enum' | 'split' | 'records' | 'filemode' | 'ssl' | 'plugins' | 'params' | 'origins' | 'proxies';

/** Checked is a value that passed its key's check, or why it did not. */
export type Checked<T> = { value: T } | { error: string };

export interface KeySpec<T = unknown> {
  kind: KeyKind;
  default: T;
  doc: string;
  /** values: what an enum key accepts. */
  values?: readonly string[];
  /** empty: the key may be an empty string (meaning "off"/"unset"). */
  empty?: boolean;
  /** min/max bound an int, or a duration in ms (a duration's 0, where a key takes it, is always allowed; its max
   * defaults to TIMER_MAX_MS). */
  min?: number;
  max?: number;
  /** check validates a value given in YAML or the environment; null and absent are the default, never checked. */
  check(v: NonNullable<unknown>): Checked<T>;
  /** fromEnv reads an environment variable's text as check expects it (a bool from `yes`, a list from `a,b`). */
  fromEnv(text: string): unknown;
}

/** ValueOf is the type of a descriptor's value. */
export type ValueOf<S> = S extends KeySpec<infer T> ? T : never;

/**
 * TIMER_MAX_MS (24 days) is the longest a duration key may be unless it says otherwise: most of them set timers,
 * and Node runs a timer longer than 2^31 - 1 ms (24.8 days) after 1 ms instead, so a longer timeout would fire at
 * once and a longer interval would run every millisecond.
 */
export const TIMER_MAX_MS = 24 * 86_400_000;

/** What every key has; the other fields are the options of some kinds. */
export interface Described<T> { default: T; doc: string }
export interface MayBeEmpty { empty?: boolean }
export interface Bounded { min?: number; max?: number }

const asText = (text: string): unknown => text;
const asJson = (text: string): unknown => {
  try { return JSON.parse(text); } catch { return text; }
};
/** asList reads `a, b` as a list, or a JSON list when the text starts with `[`. */
const asList = (text: string): unknown => {
  if (text.trim().startsWith('[')) return asJson(text);
  return text.split(',').map((s) => s.trim()).filter(Boolean);
};

function spec<T, O extends Described<T>>(kind: KeyKind, o: O, check: (v: NonNullable<unknown>) => Checked<T>, fromEnv = asText): O & KeySpec<T> {
  return { kind, ...o, check, fromEnv };
}

function checkText(empty: boolean | undefined) {
  return (v: NonNullable<unknown>): Checked<string> => {
    if (typeof v === 'number') return { value: String(v) };
    if (typeof v !== 'string') return { error: `expected a string, found ${describe(v)}` };
    if (!v && !empty) return { error: 'must not be empty' };
    return { value: v };
  };
}

/** text: any string; a YAML number is taken as its digits. */
export function text(o: Described<string> & MayBeEmpty) {
  return spec('string', o, checkText(o.empty));
}

/** path: a file or directory; relative paths are resolved in resolve.ts. */
export function path(o: Described<string> & MayBeEmpty) {
  return spec('path', o, checkText(o.empty));
}

export function bool(o: Described<boolean>) {
  return spec('bool', o, (v): Checked<boolean> => (typeof v === 'boolean' ? { value: v } : { error: `expected true or false, found ${describe(v)}` }),
    (text) => (/^(true|1|yes|on)$/i.test(text) ? true : /^(false|0|no|off)$/i.test(text) ? false : text));
}

export function int(o: Described<number> & Bounded) {
  return spec('int', o, (v): Checked<number> => {
    if (typeof v !== 'number' || !Number.isInteger(v)) return { error: `expected a whole number, found ${describe(v)}` };
    if (o.min !== undefined && v < o.min) return { error: `must be at least ${o.min}, found ${v}` };
    if (o.max !== undefined && v > o.max) return { error: `must be at most ${o.max}, found ${v}` };
    return { value: v };
  }, (text) => (/^-?\d+$/.test(text.trim()) ? Number(text) : text));
}

/**
 * duration: written `30m`, `1h30m`, `90d`, held in milliseconds. `0` usually turns the thing off; with `positive`
 * there is no off, and `0` is refused.
 */
export function duration(o: Described<number> & Bounded & { positive?: boolean }) {
  return spec('duration', o, (v): Checked<number> => {
    const zero = { error: `must be more than 0 (it cannot be turned off), found ${describe(v)}` };
    if (v === 0) return o.positive ? zero : { value: 0 };
    const ms = typeof v === 'string' ? parseDuration(v) : undefined;
    if (ms === undefined) return { error: `expected a duration such as 30m, 24h or 90d, found ${describe(v)}` };
    if (ms === 0 && o.positive) return zero;
    const max = o.max ?? TIMER_MAX_MS;
    if (ms > max) return { error: `must be at most ${formatDuration(max)}, found ${v}` };
    if (ms !== 0 && o.min !== undefined && ms < o.min) return { error: `must be at least ${formatDuration(o.min)}, found ${v}` };
    return { value: ms };
  });
}

export function strings(o: Described<string[]>) {
  return spec('strings', o, (v): Checked<string[]> => {
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) return { error: `expected a list of strings, found ${describe(v)}` };
    return { value: v };
  }, asList);
}

/**
 * origins: a list of web origins written exactly (`https://ui.example.com`, `http://127.0.0.1:3000`): scheme, host
 * and port only. A wildcard is refused, since a listed origin's pages act with whatever API key they hold.
 */
export function origins(o: Described<string[]>) {
  return spec('origins', o, (v): Checked<string[]> => {
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) return { error: `expected a list of origins, found ${describe(v)}` };
    const out: string[] = [];
    for (const s of v as string[]) {
      const wrong = { error: `expected an origin such as https://ui.example.com (scheme, host and port, no path and no wildcard), found ${describe(s)}` };
      let u: URL;
      try { u = new URL(s); } catch { return wrong; }
      if ((u.protocol !== 'http:' && u.protocol !== 'https:') || s.includes('*') || u.username || u.password) return wrong;
      if (s.replace(/\/$/, '') !== u.origin) return wrong;
      out.push(u.origin);
    }
    return { value: out };
  }, asList);
}

/** cidr: an address prefix such as 100.64.0.0/10. */
export function cidr(o: Described<string> & MayBeEmpty) {
  return spec('cidr', o, (v): Checked<string> => {
    const wrong = { error: `expected a CIDR prefix such as 100.64.0.0/10, found ${describe(v)}` };
    if (typeof v !== 'string') return wrong;
    if (v === '' && o.empty) return { value: '' };
    return v.includes('/') && parseIPPrefix(v) ? { value: v } : wrong;
  });
}

/** proxies: addresses or CIDR prefixes of reverse proxies (trusted_proxies); each bad entry is named by its place. */
export function proxies(o: Described<string[]>) {
  return spec('proxies', o, (v): Checked<string[]> => {
    if (!Array.isArray(v)) return { error: `expected a list of addresses or CIDR prefixes such as [127.0.0.1/32], found ${describe(v)}` };
    const errors = v.map((entry, i) => {
      const p = typeof entry === 'string' ? parseTrustedProxy(entry) : `expected a string, found ${describe(entry)}`;
      return typeof p === 'string' ? `[${i}] ${typeof entry === 'string' ? JSON.stringify(entry) : describe(entry)}: ${p}` : undefined;
    }).filter((e) => e !== undefined);
    return errors.length ? { error: errors.join('; ') } : { value: v.map((s: string) => s.trim()) };
  }, asList);
}

/** addr: a listening address, host:port. */
export function addr(o: Described<string> & MayBeEmpty) {
  return spec('addr', o, (v): Checked<string> => {
    if (typeof v !== 'string') return { error: `expected host:port, found ${describe(v)}` };
    if (v === '' && o.empty) return { value: '' };
    return parseHostPort(v) ? { value: v } : { error: `expected host:port (e.g. 127.0.0.1:8080 or [::1]:8080), found ${describe(v)}` };
  });
}

/** url: the http(s) URL devices are sent, without a trailing slash. */
export function url(o: Described<string>) {
  return spec('url', o, (v): Checked<string> => {
    const wrong = { error: `expected an http:// or https:// URL, found ${describe(v)}` };
    if (typeof v !== 'string') return wrong;
    let u: URL;
    try {
      u = new URL(v);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') return wrong;
    } catch { return wrong; }
    // Devices are sent this URL with paths after it (AuthURL): a password would reach every device.
    if (u.username || u.password) return { error: 'must not hold a user name or password (every device is sent this URL)' };
    if (u.search || u.hash || v.includes('?') || v.includes('#')) return { error: `must not have a query (?...) or fragment (#...): devices are sent it with paths after it, found ${describe(v)}` };
    return { value: v.replace(/\/+$/, '') };
  });
}

/** oneOf: one of a list of words; the value's type is that list's union, and the default must be in it. */
export function oneOf<const V extends string>(o: { values: readonly V[]; default: NoInfer<V>; doc: string }) {
  return spec('enum', o, (v): Checked<V> => {
    const found = typeof v === 'string' ? o.values.find((x) => x === v) : undefined;
    return found !== undefined ? { value: found } : { error: `expected one of ${o.values.join(', ')}, found ${describe(v)}` };
  });
}

/** split: domain → the nameservers that answer for it. */
export function split(o: Described<Record<string, string[]>>) {
  return spec('split', o, (v): Checked<Record<string, string[]>> => {
    const problem = splitProblem(v);
    if (problem) return { error: problem };
    return { value: Object.fromEntries(Object.entries(v as Record<string, string[]>)) };
  }, asJson);
}

/** records: DNS records served beside the nodes' own names. */
export function records(o: Described<ExtraRecord[]>) {
  return spec('records', o, (v): Checked<ExtraRecord[]> => {
    if (!Array.isArray(v)) return { error: `expected a list of {name, type, value} records, found ${describe(v)}` };
    for (const [i, r] of v.entries()) {
      const err = checkRecord(r);
      if (err) return { error: `record ${i + 1}: ${err}` };
    }
    return { value: v };
  }, asJson);
}

/** params: a mapping of names to strings; numbers and booleans are taken as their text. */
export function params(o: Described<Record<string, string>>) {
  return spec('params', o, (v): Checked<Record<string, string>> => {
    if (typeof v !== 'object' || Array.isArray(v)) return { error: `expected a mapping of parameter name to value, found ${describe(v)}` };
    const out: Record<string, string> = {};
    for (const [k, x] of Object.entries(v)) {
      if (typeof x !== 'string' && typeof x !== 'number' && typeof x !== 'boolean') return { error: `${k}: expected a string value, found ${describe(x)}` };
      out[k] = String(x);
    }
    return { value: out };
  }, asJson);
}

/** filemode: an octal file mode, held as four digits ("0770"). */
export function filemode(o: Described<string>) {
  return spec('filemode', o, (v): Checked<string> => {
    const s = typeof v === 'number' ? String(v) : v;
    return typeof s === 'string' && /^0?[0-7]{3}$/.test(s) ? { value: s.padStart(4, '0') } : { error: `expected an octal file mode such as "0770", found ${describe(v)}` };
  });
}

/** plugins: the `plugins:` list, each entry normalized by checkPluginEntry. */
export function plugins(o: Described<PluginEntry[]>) {
  return spec('plugins', o, (v): Checked<PluginEntry[]> => {
    if (!Array.isArray(v)) return { error: `expected a list of {package, port, options} entries, found ${describe(v)}` };
    const entries: PluginEntry[] = [];
    const errors: string[] = [];
    for (const [i, item] of v.entries()) {
      const checked = checkPluginEntry(item);
      if (typeof checked === 'string') errors.push(`plugins[${i}]: ${checked}`);
      else entries.push(checked);
    }
    return errors.length ? { error: errors.join('; ') } : { value: entries };
  }, asList);
}

const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full', 'true', 'false'];

/** ssl: a database connection's TLS: false, true, or a mode name (`require`, `verify-full`, ...). */
export function ssl(o: Described<boolean | string>) {
  return spec('ssl', o, (v): Checked<boolean | string> => {
    if (typeof v === 'boolean') return { value: v };
    if (typeof v === 'string' && SSL_MODES.includes(v)) return { value: v === 'true' ? true : v === 'false' ? false : v };
    return { error: `expected true, false, or one of disable, require, verify-ca, verify-full, found ${describe(v)}` };
  }, (text) => (/^(true|false)$/i.test(text) ? text.toLowerCase() === 'true' : text));
}
