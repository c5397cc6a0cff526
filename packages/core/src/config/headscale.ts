import type { ConfigKey, ConfigValues } from './keys.js';
import type { ConfigProblem } from './problems.js';

/*
 * Headscale compatibility: headscale keys Headway has removed, renamed, or accepts without acting on. A headscale
 * config.yaml therefore starts, or stops with a message saying exactly what to change.
 */

/**
 * REMOVED keys stop the server: each entry says exactly what to change, because
 * a server under a restart policy would otherwise loop on an unclear error.
 * RENAMED keys keep working with a warning.
 */
export const REMOVED: Record<string, string> = {
  randomize_client_port: 'set `randomizeClientPort: true` at the top level of the policy file',
  acl_policy_path: 'use `policy.path`',
  'dns_config.magic_dns': 'use `dns.magic_dns`',
  'dns_config.base_domain': 'use `dns.base_domain`',
  'dns_config.override_local_dns': 'use `dns.override_local_dns`',
  'dns_config.nameservers': 'use `dns.nameservers.global`',
  'dns_config.restricted_nameservers': 'use `dns.nameservers.split`',
  'dns_config.domains': 'use `dns.search_domains`',
  'dns_config.extra_records': 'use `dns.extra_records`',
  'dns_config.use_username_in_magic_dns': 'remove it: node names no longer include the user name',
  dns_config: 'move its keys under `dns` (magic_dns, base_domain, override_local_dns, nameservers.global, nameservers.split, search_domains, extra_records)',
  'oidc.expiry': 'use `node.expiry` (or `oidc.use_expiry_from_token: true`)',
  'oidc.strip_email_domain': 'remove it: users are matched by the provider\'s subject, and policies name them by e-mail address',
  'oidc.map_legacy_users': 'remove it: link an existing user to a provider identity with `headway users link`',
  db_type: 'use `database.type`',
  db_path: 'use `database.sqlite.path`',
  db_host: 'use `database.postgres.host`',
  db_port: 'use `database.postgres.port`',
  db_name: 'use `database.postgres.name`',
  db_user: 'use `database.postgres.user`',
  db_pass: 'use `database.postgres.pass`',
  db_ssl: 'use `database.postgres.ssl`',
};

export const RENAMED: Record<string, ConfigKey> = {
  ephemeral_node_inactivity_timeout: 'node.ephemeral.inactivity_timeout',
};

/**
 * NotImplemented describes headscale config keys Headway accepts (so a headscale config
 * still starts) but does not act on. `config check` names each one found as a warning
 * (an error with --strict), and the server logs the same warning at start-up, so an
 * administrator is never told a feature is configured when it is not.
 */
export interface NotImplemented {
  /** feature is what the keys configure in headscale. */
  feature: string;
  /** instead says what Headway does or offers in its place. */
  instead: string;
}

/**
 * NOT_IMPLEMENTED_PREFIXES: keys not in KEYS whose name starts with one of these are
 * accepted and reported (`database.gorm` covers every `database.gorm.*` key). A key listed in KEYS or REMOVED is never matched here.
 */
export const NOT_IMPLEMENTED_PREFIXES: Record<string, NotImplemented> = {
  'database.gorm': { feature: 'gorm (headscale\'s ORM) tuning', instead: 'Headway does not use gorm; database.debug logs SQL' },
  'dns.use_username_in_magic_dns': { feature: 'user names in MagicDNS names', instead: 'node names never include the user name' },
  'policy.v1': { feature: 'the version 1 policy format', instead: 'Headway reads the current Tailscale policy format only' },
};

/**
 * NOT_IMPLEMENTED_KEYS are keys of KEYS kept for headscale compatibility that do nothing:
 * any value other than `inert` (what Headway does anyway) is reported.
 */
export const NOT_IMPLEMENTED_KEYS: { readonly [N in ConfigKey]?: NotImplemented & { inert: ConfigValues[N] } } = {
  disable_check_updates: { inert: true, feature: 'update checks', instead: 'Headway never checks for updates' },
  'logtail.enabled': { inert: false, feature: 'client log uploads (logtail)', instead: 'clients are never told to upload logs' },
  'auto_update.enabled': { inert: false, feature: 'client auto-update (the ClientVersion auto-update nudge)', instead: 'clients keep their own update setting' },
};

/**
 * HEADSCALE_DEFAULTS are the keys whose default differs from headscale 0.29's: headscale's
 * value (what a headscale config without the key ran on) and why Headway's differs. A config
 * written for headscale (headscaleMarker) that leaves one of these out is warned about, naming
 * the key and both values, so a moved deployment never changes behaviour without a word.
 */
export const HEADSCALE_DEFAULTS: { readonly [N in ConfigKey]?: { headscale: ConfigValues[N]; shown: string; why: string; when?: (v: ConfigValues) => boolean } } = {
  // headscale refuses to start with override_local_dns true and no global nameservers, so only a config that has them ran with it.
  'dns.override_local_dns': { headscale: true, shown: 'true', why: 'without global nameservers there is nothing to override with', when: (v) => v['dns.nameservers.global'].length > 0 },
  'derp.server.enabled': { headscale: false, shown: 'false', why: 'with no DERP map configured (Headway fetches none by default), devices need a relay to come up' },
  'derp.auto_update_enabled': { headscale: false, shown: 'false', why: 'a DERP map source that changes is re-read without a restart', when: (v) => v['derp.urls'].length + v['derp.paths'].length > 0 },
  'node.ephemeral.inactivity_timeout': { headscale: 120_000, shown: '120s', why: 'an ephemeral device asleep or on a bad network for a few minutes keeps its node and address' },
  // Only a config with a Let's Encrypt host name used the directory; without headscale's cache a new certificate is ordered once.
  tls_letsencrypt_cache_dir: { headscale: '/var/www/.cache', shown: '/var/www/.cache', why: 'the server\'s files stay under data_dir', when: (v) => v.tls_letsencrypt_hostname !== '' },
};

/** HEADSCALE_PATH_KEYS are the file paths headscale's own config example places under a `headscale` directory. */
const HEADSCALE_PATH_KEYS = ['noise.private_key_path', 'database.sqlite.path', 'derp.server.private_key_path', 'unix_socket'] as const;

/**
 * headscaleMarker says why a config file reads as written for headscale, or undefined: it sets a
 * key only headscale has (removed, renamed, or one of NOT_IMPLEMENTED_PREFIXES), or keeps its files
 * under a `headscale` directory (/var/lib/headscale/..., /var/run/headscale/...).
 */
export function headscaleMarker(keys: readonly string[], flat: ReadonlyMap<string, { value: unknown }>): string | undefined {
  const own = keys.find((k) => Object.hasOwn(REMOVED, k) || Object.hasOwn(RENAMED, k) || unimplementedFeature(k) !== undefined);
  if (own) return `it sets ${own}, a headscale key`;
  for (const k of HEADSCALE_PATH_KEYS) {
    const v = flat.get(k)?.value;
    if (typeof v === 'string' && /(^|\/)headscale(\/|\.sock$)/.test(v)) return `its ${k} is under a headscale directory`;
  }
  return undefined;
}

/** headscaleDefaultProblems warns, for a config written for headscale, about each key left out whose default differs. */
export function headscaleDefaultProblems(marker: string | undefined, given: (k: ConfigKey) => boolean, values: ConfigValues): ConfigProblem[] {
  if (!marker) return [];
  const out: ConfigProblem[] = [];
  for (const [key, d] of Object.entries(HEADSCALE_DEFAULTS) as Array<[ConfigKey, NonNullable<(typeof HEADSCALE_DEFAULTS)[ConfigKey]>]>) {
    if (given(key) || (d.when && !d.when(values))) continue;
    out.push({
      level: 'warn', key, code: 'headscale_default',
      message: `absent, so Headway uses its default ${shownDefault(values[key])} where headscale used ${d.shown} (${d.why}); this config reads as written for headscale (${marker}): set ${key} to keep either behaviour and silence this`,
    });
  }
  return out;
}

function shownDefault(v: unknown): string {
  return typeof v === 'number' ? `${v / 60_000}m` : String(v);
}

/** Unimplemented collects the not-implemented keys found, grouped by the feature they configure. */
export type Unimplemented = Map<string, { spec: NotImplemented; keys: string[] }>;

export function note(found: Unimplemented, spec: NotImplemented, key: string): void {
  const entry = found.get(spec.feature) ?? found.set(spec.feature, { spec, keys: [] }).get(spec.feature)!;
  entry.keys.push(key);
}

/** unimplementedFeature finds the not-implemented headscale feature a key belongs to, if any. */
export function unimplementedFeature(key: string): NotImplemented | undefined {
  for (const [p, spec] of Object.entries(NOT_IMPLEMENTED_PREFIXES)) {
    if (key === p || key.startsWith(p.endsWith('_') ? p : `${p}.`)) return spec;
  }
  return undefined;
}

/** unimplementedProblems turns each feature found into one warning naming every key of it that was set. */
export function unimplementedProblems(found: Unimplemented): ConfigProblem[] {
  return [...found.values()].map(({ spec, keys }) => ({
    level: 'warn' as const,
    key: keys.join(', '),
    message: `accepted for headscale compatibility but not implemented: ${spec.feature} (${keys.length === 1 ? 'this key is' : 'these keys are'} ignored); ${spec.instead}`,
    code: 'not_implemented' as const,
  }));
}
