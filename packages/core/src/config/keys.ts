/**
 * KEYS is the one table of every configuration key Headway reads: its kind (for
 * parsing YAML, environment overrides and validation), its default and a one-line
 * description (examples/config.example.yaml documents the same keys). Defaults never
 * point outside the machine.
 */
export type KeyKind =
  | 'string' | 'bool' | 'int' | 'duration' | 'strings' | 'cidr' | 'addr' | 'url' | 'path'
  | 'enum' | 'split' | 'records' | 'filemode' | 'ssl' | 'plugins' | 'params';

export interface KeySpec {
  kind: KeyKind;
  default: unknown;
  doc: string;
  values?: readonly string[];
  /** empty: the key may be an empty string (meaning "off"/"unset"). */
  empty?: boolean;
  /** min/max bound an int, or a duration in ms (a duration's 0, where a key takes it, is always allowed; its max
   * defaults to TIMER_MAX_MS). */
  min?: number;
  max?: number;
}

/**
 * TIMER_MAX_MS (24 days) is the longest a duration key may be unless it says otherwise: most of them set timers,
 * and Node runs a timer longer than 2^31 - 1 ms (24.8 days) after 1 ms instead (a 30-day handshake timeout closed
 * every connection at once, a 30-day cleanup interval ran every millisecond).
 */
export const TIMER_MAX_MS = 24 * 86_400_000;
/** NODE_EXPIRY_MAX_MS (100 years): node.expiry is added to the login time, which must stay a time clients can read. */
export const NODE_EXPIRY_MAX_MS = 36_500 * 86_400_000;

const net = (prefix: string, port: number, name: string): Record<string, KeySpec> => ({
  [`${prefix}.host`]: { kind: 'string', default: '127.0.0.1', doc: `${name} server host` },
  [`${prefix}.port`]: { kind: 'int', default: port, min: 1, max: 65535, doc: `${name} server port` },
  [`${prefix}.name`]: { kind: 'string', default: 'headway', doc: 'database name' },
  [`${prefix}.user`]: { kind: 'string', default: 'headway', doc: 'user name' },
  [`${prefix}.pass`]: { kind: 'string', default: '', empty: true, doc: 'password' },
  [`${prefix}.max_open_conns`]: { kind: 'int', default: 10, min: 1, max: 1000, doc: 'largest pool size' },
  [`${prefix}.max_idle_conns`]: { kind: 'int', default: 10, min: 0, max: 1000, doc: 'connections kept open when idle' },
  [`${prefix}.conn_max_idle_time_secs`]: { kind: 'int', default: 3600, min: 0, doc: 'seconds before an idle connection closes' },
  [`${prefix}.ssl`]: { kind: 'ssl', default: false, doc: 'false, true, or a mode (require, verify-ca, verify-full)' },
});

export const KEYS: Record<string, KeySpec> = {
  data_dir: { kind: 'path', default: '', empty: true, doc: 'directory for the database, keys and socket when their paths are relative or unset (default: ~/.local/share/headway)' },
  server_url: { kind: 'url', default: 'http://127.0.0.1:8080', doc: 'the URL devices use to reach this server (tailscale up --login-server)' },
  listen_addr: { kind: 'addr', default: '127.0.0.1:8080', doc: 'HTTP listener: the control protocol, the API, the register page' },
  metrics_listen_addr: { kind: 'addr', default: '127.0.0.1:9090', empty: true, doc: 'Prometheus /metrics listener; empty disables it' },
  grpc_listen_addr: { kind: 'addr', default: '127.0.0.1:50443', empty: true, doc: "headscale's gRPC API (headscale.v1.HeadscaleService, for headscale's CLI in remote mode and gRPC clients; calls need an API key); TLS with tls_cert_path/tls_key_path, plaintext only on a loopback address or with grpc_allow_insecure; empty disables it" },
  grpc_allow_insecure: { kind: 'bool', default: false, doc: 'serve the gRPC API without TLS on a non-loopback grpc_listen_addr (TLS terminated in front of Headway); API keys then cross the network in the clear' },
  'noise.private_key_path': { kind: 'path', default: 'noise_private.key', doc: 'the control key (generated on first start); relative to data_dir' },
  'noise.handshake_timeout': { kind: 'duration', min: 100, default: 10_000, doc: 'longest time from TCP accept (or from a response on a kept-alive connection) to a complete request or ts2021 upgrade, on listen_addr and metrics_listen_addr, and to a complete request head (the TLS handshake included) on the relay\'s own port (derp.server.tls_listen_addr); 0 disables' },
  'noise.first_request_timeout': { kind: 'duration', min: 100, default: 30_000, doc: 'longest time from a finished Noise handshake to its first HTTP/2 request, and for any request body to arrive in full; 0 disables' },
  'noise.idle_timeout': { kind: 'duration', min: 100, default: 5 * 60_000, doc: 'a Noise connection with no open request (a map long-poll is open) is closed after this long; 0 disables' },
  'noise.max_unauthenticated_sessions': { kind: 'int', default: 50_000, min: 1, doc: 'open Noise sessions whose machine key has no registered node, server-wide' },
  'noise.max_unauthenticated_sessions_per_address': { kind: 'int', default: 10_000, min: 1, doc: 'the same per source address (an IPv4 address or an IPv6 /64); sized so a 10,000-device fleet behind one NAT can enroll at once' },
  'noise.handshake_rate': { kind: 'int', default: 200, min: 1, doc: 'Noise handshakes per second one source address may start, sustained (token bucket refill); excess get HTTP 429' },
  'noise.handshake_burst': { kind: 'int', default: 2000, min: 1, doc: 'handshakes one source address may start at once (token bucket size)' },
  'noise.replay_window': { kind: 'duration', default: 10 * 60_000, doc: 'how long accepted handshake initiations are remembered so a replayed one is refused before any key agreement' },
  'registration.pending_expiry': { kind: 'duration', default: 15 * 60_000, doc: 'an interactive login (AuthURL) not approved within this time is forgotten' },
  'registration.max_pending': { kind: 'int', default: 10_000, min: 1, doc: 'interactive logins waiting for approval, server-wide (every instance sharing the database counted)' },
  'registration.max_pending_per_address': { kind: 'int', default: 1000, min: 1, doc: 'the same per source address (a machine key holds one per node key and three in all: a new login replaces its oldest)' },
  'registration.max_hostinfo_bytes': { kind: 'int', default: 65_536, min: 1024, doc: 'largest device description (Hostinfo JSON) stored with a waiting login' },
  'registration.gc_interval': { kind: 'duration', min: 100, default: 60_000, doc: 'how often expired waiting logins are deleted from the database; 0 turns the sweep off' },
  'prefixes.v4': { kind: 'cidr', default: '100.64.0.0/10', empty: true, doc: 'IPv4 range nodes get addresses from; empty disables IPv4' },
  'prefixes.v6': { kind: 'cidr', default: 'fd7a:115c:a1e0::/48', empty: true, doc: 'IPv6 range nodes get addresses from; empty disables IPv6' },
  'prefixes.allocation': { kind: 'enum', values: ['sequential', 'random'], default: 'sequential', doc: 'how addresses are picked' },
  'derp.server.enabled': { kind: 'bool', default: true, doc: 'run the embedded DERP relay on listen_addr at /derp (on by default: with no public DERP map configured, devices need a relay to come up)' },
  'derp.server.region_id': { kind: 'int', default: 999, min: 1, max: 65535, doc: 'region id of the embedded relay' },
  'derp.server.region_code': { kind: 'string', default: 'headway', doc: 'region code of the embedded relay' },
  'derp.server.region_name': { kind: 'string', default: 'Headway Embedded DERP', doc: 'region name of the embedded relay' },
  'derp.server.verify_clients': { kind: 'bool', default: true, doc: 'admit only registered, unexpired nodes to the relay' },
  'derp.server.stun_listen_addr': { kind: 'addr', default: '127.0.0.1:3478', empty: true, doc: 'UDP address of the STUN server; loopback like listen_addr by default (0.0.0.0:3478 to serve other machines); empty disables STUN' },
  'derp.server.tls_listen_addr': { kind: 'addr', default: '', empty: true, doc: 'TLS port of the relay when server_url is http:// and tls_cert_path is unset (clients dial DERP only over TLS; a self-signed certificate in data_dir is pinned in the DERP map); the port also accepts plain HTTP; empty: listen_addr\'s host, on a port picked at start-up (set a fixed one to open it in a firewall)' },
  'derp.server.max_unauthenticated_connections_per_address': { kind: 'int', default: 1000, min: 1, doc: 'relay connections from one source address (an IPv4 address or an IPv6 /64) that have not logged in yet; more get HTTP 429. A device is in that state for one round trip, so a fleet behind one NAT reconnecting at once stays far below it, while it bounds what one address can hold open until the 10 s login deadline' },
  'derp.server.login_rate': { kind: 'int', default: 100, min: 1, doc: 'relay logins per second one source address may attempt, sustained (token bucket refill); each costs the server about a millisecond of public-key crypto, so this bounds one address to about a tenth of a core, and a 10,000-device fleet behind one NAT is back in under two minutes after a restart' },
  'derp.server.login_burst': { kind: 'int', default: 1000, min: 1, doc: 'relay logins one source address may attempt at once (token bucket size), so a fleet of up to 1,000 devices behind one NAT reconnects at once; logins past the rate are refused (connection closed) before any crypto, and clients retry' },
  'derp.server.private_key_path': { kind: 'path', default: 'derp_server_private.key', doc: 'the relay key (generated on first start); relative to data_dir' },
  'derp.server.automatically_add_embedded_derp_region': { kind: 'bool', default: true, doc: 'add the embedded relay to every node DERP map' },
  'derp.server.ipv4': { kind: 'string', default: '', empty: true, doc: 'public IPv4 of the relay advertised to clients' },
  'derp.server.ipv6': { kind: 'string', default: '', empty: true, doc: 'public IPv6 of the relay advertised to clients' },
  'derp.urls': { kind: 'strings', default: [], doc: 'DERP map JSON URLs to merge (none by default: nothing outside this machine is fetched unless configured)' },
  'derp.paths': { kind: 'strings', default: [], doc: 'DERP map files (YAML or JSON) to merge' },
  'derp.auto_update_enabled': { kind: 'bool', default: true, doc: 're-read derp.urls and derp.paths periodically' },
  'derp.update_frequency': { kind: 'duration', min: 10_000, default: 3 * 3600_000, doc: 'how often to re-read them' },
  disable_check_updates: { kind: 'bool', default: true, doc: 'accepted for headscale compatibility: Headway never checks for updates; false is a config check warning' },
  'node.expiry': { kind: 'duration', max: NODE_EXPIRY_MAX_MS, default: 0, doc: 'how long a node key is valid after login; 0 means no expiry' },
  'node.ephemeral.inactivity_timeout': { kind: 'duration', default: 30 * 60_000, doc: 'ephemeral nodes are deleted after this long without a session' },
  'database.type': { kind: 'string', default: 'sqlite', doc: 'sqlite | postgres | mysql | an npm package name providing a storage adapter' },
  'database.debug': { kind: 'bool', default: false, doc: 'log every SQL statement at debug level (bound values never shown); log.level trace logs them too' },
  'database.sqlite.path': { kind: 'path', default: 'db.sqlite', doc: 'SQLite file; relative to data_dir' },
  'database.sqlite.write_ahead_log': { kind: 'bool', default: true, doc: 'use WAL journaling' },
  'database.sqlite.wal_autocheckpoint': { kind: 'int', default: 1000, min: 0, doc: 'pages between WAL checkpoints' },
  'database.sqlite.synchronous': { kind: 'enum', values: ['normal', 'full'], default: 'normal', doc: 'with WAL: normal syncs at checkpoints only (an OS crash or power loss may lose the last commits, never corrupts); full syncs every commit, blocking the server ~2 ms per write on a typical disk' },
  ...net('database.postgres', 5432, 'PostgreSQL'),
  ...net('database.mysql', 3306, 'MySQL/MariaDB'),
  'cluster.enabled': { kind: 'bool', default: false, doc: 'run as one of several instances sharing one PostgreSQL or MySQL/MariaDB database (not SQLite); every instance needs the same noise private key' },
  'cluster.advertise_addr': { kind: 'string', default: '', empty: true, doc: 'how other instances and `headway cluster status` name this instance (host:port, or http(s)://host:port); the other instances\' relays mesh with this one\'s at /derp there, so it must be reachable from them (with https, by a name its certificate covers); empty: the address listen_addr is bound to' },
  'cluster.heartbeat_interval': { kind: 'duration', default: 2000, doc: 'how often an instance writes its heartbeat row' },
  'cluster.instance_timeout': { kind: 'duration', default: 10_000, doc: 'an instance whose heartbeat is older than this is dead: its devices count as offline and its jobs move to another instance' },
  'cluster.poll_interval': { kind: 'duration', default: 200, doc: 'MySQL/MariaDB: how often the change log is read for other instances\' changes (PostgreSQL is told at once through LISTEN/NOTIFY)' },
  'cluster.change_retention': { kind: 'duration', default: 10 * 60_000, doc: 'MySQL/MariaDB: how long change-log rows are kept before they are pruned' },
  tls_cert_path: { kind: 'path', default: '', empty: true, doc: 'PEM certificate: serve HTTPS on listen_addr' },
  tls_key_path: { kind: 'path', default: '', empty: true, doc: 'PEM private key for tls_cert_path' },
  'log.level': { kind: 'enum', values: ['trace', 'debug', 'info', 'warn', 'error'], default: 'info', doc: 'log level' },
  'log.format': { kind: 'enum', values: ['text', 'json'], default: 'text', doc: 'log format' },
  'policy.mode': { kind: 'string', default: 'file', doc: 'file | database | an npm package name providing a policy source' },
  'policy.path': { kind: 'path', default: '', empty: true, doc: 'HuJSON policy file (file mode); empty means no policy: every node may reach every node' },
  'dns.magic_dns': { kind: 'bool', default: true, doc: 'give every node a name under base_domain' },
  'dns.base_domain': { kind: 'string', default: 'headway.net', empty: true, doc: 'the MagicDNS domain (must not contain server_url host)' },
  'dns.override_local_dns': { kind: 'bool', default: false, doc: 'make devices use the global nameservers for everything' },
  'dns.nameservers.global': { kind: 'strings', default: [], doc: 'nameserver IPs or DoH URLs for all queries' },
  'dns.nameservers.split': { kind: 'split', default: {}, doc: 'domain → nameservers for that domain only' },
  'dns.search_domains': { kind: 'strings', default: [], doc: 'extra search domains' },
  'dns.extra_records': { kind: 'records', default: [], doc: 'extra A/AAAA records ({name, type, value})' },
  'dns.extra_records_path': { kind: 'path', default: '', empty: true, doc: 'JSON file of extra records, re-read when it changes' },
  plugins: { kind: 'plugins', default: [], doc: 'extra adapters, each {package, port, options}: port dns (several merge their records in this order) or drive (Taildrive grants beyond the policy, several apply in this order; @headway/drive-db keeps them in the database for headway drive); options are checked by the plugin; storage and policy come from database.type and policy.mode' },
  unix_socket: { kind: 'path', default: 'headway.sock', doc: 'local API socket for the CLI; relative to data_dir' },
  unix_socket_permission: { kind: 'filemode', default: '0770', doc: 'file mode of the socket (octal)' },
  'logtail.enabled': { kind: 'bool', default: false, doc: 'accepted for headscale compatibility, not implemented: clients are never told to upload logs; true is a config check warning' },
  'taildrop.enabled': { kind: 'bool', default: true, doc: 'allow file sharing between a user\'s devices' },
  'cli.address': { kind: 'string', default: '', empty: true, doc: 'remote server for the CLI (http[s]://host:port); empty uses the local socket' },
  'cli.api_key': { kind: 'string', default: '', empty: true, doc: 'API key for cli.address' },
  'cli.timeout': { kind: 'duration', default: 10_000, doc: 'CLI request timeout' },
  'cli.insecure': { kind: 'bool', default: false, doc: 'skip TLS verification for cli.address' },
  // Sign-in with an identity provider (issue 12); headscale's oidc keys, on when oidc.issuer is set.
  'oidc.only_start_if_oidc_is_available': { kind: 'bool', default: true, doc: 'refuse to start when the provider cannot be reached at start-up (false: start anyway and retry discovery at each login)' },
  'oidc.issuer': { kind: 'string', default: '', empty: true, doc: 'the provider\'s issuer URL (its /.well-known/openid-configuration is read); empty turns sign-in with a provider off' },
  'oidc.client_id': { kind: 'string', default: '', empty: true, doc: 'the client id registered at the provider (redirect URI: <server_url>/oidc/callback)' },
  'oidc.client_secret': { kind: 'string', default: '', empty: true, doc: 'the client secret (never logged); or use client_secret_path' },
  'oidc.client_secret_path': { kind: 'path', default: '', empty: true, doc: 'file holding the client secret (${VAR} expanded, whitespace trimmed); exclusive with client_secret' },
  'oidc.scope': { kind: 'strings', default: ['openid', 'profile', 'email'], doc: 'scopes requested (add groups when the provider needs a scope for the groups claim)' },
  'oidc.extra_params': { kind: 'params', default: {}, doc: 'extra query parameters for the authorization request (e.g. domain_hint: example.com)' },
  'oidc.allowed_domains': { kind: 'strings', default: [], doc: 'only e-mail addresses in these domains may log in' },
  'oidc.allowed_groups': { kind: 'strings', default: [], doc: 'only members of one of these provider groups (groups claim) may log in' },
  'oidc.allowed_users': { kind: 'strings', default: [], doc: 'only these e-mail addresses may log in' },
  'oidc.email_verified_required': { kind: 'bool', default: true, doc: 'an unverified e-mail address is not trusted for allowed_domains/allowed_users nor stored' },
  'oidc.pkce.enabled': { kind: 'bool', default: false, doc: 'use PKCE (RFC 7636) in the authorization code flow' },
  'oidc.pkce.method': { kind: 'enum', values: ['S256', 'plain'], default: 'S256', doc: 'PKCE challenge method' },
  'oidc.use_expiry_from_token': { kind: 'bool', default: false, doc: 'a node logged in through the provider expires with the ID token instead of after node.expiry' },
  'oidc.policy_groups': { kind: 'bool', default: false, doc: 'a policy group (group:NAME, declared in groups) also holds every user whose provider groups claim has NAME' },
  // Operations hardening (issue 15.6): who may read /v1/metrics on listen_addr.
  'metrics.public_endpoint': { kind: 'bool', default: true, doc: 'serve /v1/metrics (counts of users, nodes and keys) on listen_addr as headscale does; false answers 404 there (metrics_listen_addr is unaffected)' },
  'metrics.require_api_key': { kind: 'bool', default: false, doc: '/v1/metrics on listen_addr needs an API key (Authorization: Bearer); metrics_listen_addr stays open' },
};

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

export const RENAMED: Record<string, string> = {
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
 * accepted and reported (`tls_letsencrypt_` covers every `tls_letsencrypt_*` key). A key listed in KEYS or REMOVED is never matched here.
 */
export const NOT_IMPLEMENTED_PREFIXES: Record<string, NotImplemented> = {
  tls_letsencrypt_: { feature: 'Let\'s Encrypt certificates', instead: 'set tls_cert_path and tls_key_path, or put Headway behind a proxy that terminates TLS' },
  acme_url: { feature: 'Let\'s Encrypt certificates', instead: 'set tls_cert_path and tls_key_path, or put Headway behind a proxy that terminates TLS' },
  acme_email: { feature: 'Let\'s Encrypt certificates', instead: 'set tls_cert_path and tls_key_path, or put Headway behind a proxy that terminates TLS' },
  'database.gorm': { feature: 'gorm (headscale\'s ORM) tuning', instead: 'Headway does not use gorm; database.debug logs SQL' },
  'dns.use_username_in_magic_dns': { feature: 'user names in MagicDNS names', instead: 'node names never include the user name' },
  'policy.v1': { feature: 'the version 1 policy format', instead: 'Headway reads the current Tailscale policy format only' },
};

/**
 * NOT_IMPLEMENTED_KEYS are keys of KEYS kept for headscale compatibility that do nothing:
 * any value other than `inert` (what Headway does anyway) is reported.
 */
export const NOT_IMPLEMENTED_KEYS: Record<string, NotImplemented & { inert: unknown }> = {
  disable_check_updates: { inert: true, feature: 'update checks', instead: 'Headway never checks for updates' },
  'logtail.enabled': { inert: false, feature: 'client log uploads (logtail)', instead: 'clients are never told to upload logs' },
};
