import type { PluginEntry } from '../ports/adapter.js';

/**
 * HeadwayConfig mirrors headscale's config.yaml where the features overlap, so an
 * existing headscale config works with at most the documented changes. Durations
 * are milliseconds here (written as `30m`, `24h`, `90d` in YAML).
 */
export interface SqliteConfig { path: string; write_ahead_log: boolean; wal_autocheckpoint: number; synchronous: 'normal' | 'full' }

export interface NetworkDatabaseConfig {
  host: string;
  port: number;
  name: string;
  user: string;
  pass: string;
  max_open_conns: number;
  max_idle_conns: number;
  conn_max_idle_time_secs: number;
  /** ssl: false, true, or a mode name (`require`, `verify-full`, ...). */
  ssl: boolean | string;
}

export interface DatabaseConfig {
  type: string;
  debug: boolean;
  sqlite: SqliteConfig;
  postgres: NetworkDatabaseConfig;
  mysql: NetworkDatabaseConfig;
}

export interface DerpServerConfig {
  enabled: boolean;
  region_id: number;
  region_code: string;
  region_name: string;
  verify_clients: boolean;
  stun_listen_addr: string;
  tls_listen_addr: string;
  max_unauthenticated_connections_per_address: number;
  login_rate: number;
  login_burst: number;
  private_key_path: string;
  automatically_add_embedded_derp_region: boolean;
  ipv4: string;
  ipv6: string;
}

export interface DerpConfig {
  server: DerpServerConfig;
  urls: string[];
  paths: string[];
  auto_update_enabled: boolean;
  update_frequency: number;
}

export interface DnsConfig {
  magic_dns: boolean;
  base_domain: string;
  override_local_dns: boolean;
  nameservers: { global: string[]; split: Record<string, string[]> };
  search_domains: string[];
  extra_records: Array<{ name: string; type: string; value: string }>;
  extra_records_path: string;
}

/** NoiseConfig: the control key and the limits that keep unauthenticated ts2021 traffic cheap (durations in ms). */
export interface NoiseConfig {
  private_key_path: string;
  handshake_timeout: number;
  first_request_timeout: number;
  idle_timeout: number;
  max_unauthenticated_sessions: number;
  max_unauthenticated_sessions_per_address: number;
  handshake_rate: number;
  handshake_burst: number;
  replay_window: number;
}

/** RegistrationConfig bounds interactive logins waiting for an administrator. */
export interface RegistrationConfig {
  pending_expiry: number;
  max_pending: number;
  max_pending_per_address: number;
  max_hostinfo_bytes: number;
  gc_interval: number;
}

/**
 * OidcConfig is headscale's `oidc:` block: sign-in through an OpenID Connect provider,
 * on when `issuer` is set. `client_secret` is a secret: never log it.
 */
export interface OidcConfig {
  only_start_if_oidc_is_available: boolean;
  issuer: string;
  client_id: string;
  client_secret: string;
  client_secret_path: string;
  scope: string[];
  extra_params: Record<string, string>;
  allowed_domains: string[];
  allowed_groups: string[];
  allowed_users: string[];
  email_verified_required: boolean;
  pkce: { enabled: boolean; method: 'S256' | 'plain' };
  use_expiry_from_token: boolean;
  /** policy_groups lets a policy's group:NAME also hold users whose provider groups include NAME. */
  policy_groups: boolean;
}

/**
 * ClusterConfig runs several instances on one PostgreSQL or MySQL/MariaDB database
 * (durations in ms); off by default, refused on SQLite.
 */
export interface ClusterConfig {
  enabled: boolean;
  advertise_addr: string;
  heartbeat_interval: number;
  instance_timeout: number;
  poll_interval: number;
  change_retention: number;
}

export interface HeadwayConfig {
  /** data_dir is Headway's own key: where relative default paths (database, keys, socket) live. */
  data_dir: string;
  server_url: string;
  listen_addr: string;
  metrics_listen_addr: string;
  grpc_listen_addr: string;
  grpc_allow_insecure: boolean;
  noise: NoiseConfig;
  registration: RegistrationConfig;
  prefixes: { v4: string; v6: string; allocation: 'sequential' | 'random' };
  derp: DerpConfig;
  disable_check_updates: boolean;
  node: { expiry: number; ephemeral: { inactivity_timeout: number } };
  database: DatabaseConfig;
  cluster: ClusterConfig;
  tls_cert_path: string;
  tls_key_path: string;
  log: { level: 'trace' | 'debug' | 'info' | 'warn' | 'error'; format: 'text' | 'json' };
  policy: { mode: string; path: string };
  dns: DnsConfig;
  plugins: PluginEntry[];
  unix_socket: string;
  unix_socket_permission: string;
  logtail: { enabled: boolean };
  taildrop: { enabled: boolean };
  cli: { address: string; api_key: string; timeout: number; insecure: boolean };
  metrics: { public_endpoint: boolean; require_api_key: boolean };
  oidc: OidcConfig;
}
