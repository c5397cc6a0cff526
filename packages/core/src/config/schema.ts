import type { ConfigValues } from './keys.js';

/**
 * Nested turns a record of dotted keys into nested objects: { 'a.b': X, 'a.c': Y, d: Z } becomes
 * { a: { b: X; c: Y }; d: Z }, the type of what resolve.ts's nest does at run time.
 */
export type Nested<T> = {
  [H in Head<keyof T & string>]: H extends keyof T ? T[H] : Nested<{ [K in keyof T & string as Tail<K, H>]: T[K] }>;
};
/** Head is a dotted key's first part (`derp` of `derp.server.enabled`). */
type Head<K extends string> = K extends `${infer H}.${string}` ? H : K;
/** Tail is the rest of a key below `head` (`server.enabled`), never for a key outside it. */
type Tail<K extends string, H extends string> = K extends `${H}.${infer R}` ? R : never;

/**
 * HeadwayConfig mirrors headscale's config.yaml where the features overlap, so an
 * existing headscale config works with at most the documented changes. Durations
 * are milliseconds here (written as `30m`, `24h`, `90d` in YAML). It is the key
 * table (keys.ts) nested at its dots: a key's type is the one its descriptor carries.
 */
export type HeadwayConfig = Nested<ConfigValues>;

export type DatabaseConfig = HeadwayConfig['database'];
export type SqliteConfig = DatabaseConfig['sqlite'];
/** NetworkDatabaseConfig: database.postgres and database.mysql, the same keys under each. */
export type NetworkDatabaseConfig = DatabaseConfig['postgres'];
export type DerpConfig = HeadwayConfig['derp'];
export type DerpServerConfig = DerpConfig['server'];
export type DnsConfig = HeadwayConfig['dns'];
/** NoiseConfig: the control key and the limits that keep unauthenticated ts2021 traffic cheap (durations in ms). */
export type NoiseConfig = HeadwayConfig['noise'];
/** RegistrationConfig bounds interactive logins waiting for an administrator. */
export type RegistrationConfig = HeadwayConfig['registration'];
/**
 * OidcConfig is headscale's `oidc:` block: sign-in through an OpenID Connect provider,
 * on when `issuer` is set. `client_secret` is a secret: never log it.
 */
export type OidcConfig = HeadwayConfig['oidc'];
/**
 * ClusterConfig runs several instances on one PostgreSQL or MySQL/MariaDB database
 * (durations in ms); off by default, refused on SQLite.
 */
export type ClusterConfig = HeadwayConfig['cluster'];
