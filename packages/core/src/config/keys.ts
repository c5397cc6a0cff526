import { addr, bool, cidr, duration, filemode, int, oneOf, origins, params, path, plugins, proxies, records, split, ssl, strings, text, url, type KeySpec, type ValueOf } from './kinds.js';

/**
 * KEYS is the one table of every configuration key Headway reads: its kind (for
 * parsing YAML, environment overrides and validation), its default and a one-line
 * description (examples/config.example.yaml documents the same keys). Each entry is
 * made by a kind's constructor (kinds.ts), whose type carries the value's type: the
 * configuration's TypeScript type (HeadwayConfig, schema.ts) is derived from this
 * table, so a key added here is typed everywhere. Defaults never point outside the
 * machine.
 */

export { TIMER_MAX_MS, type KeyKind, type KeySpec } from './kinds.js';
export { HEADSCALE_DEFAULTS, NOT_IMPLEMENTED_KEYS, NOT_IMPLEMENTED_PREFIXES, REMOVED, RENAMED, type NotImplemented } from './headscale.js';

/** NODE_EXPIRY_MAX_MS (100 years): node.expiry is added to the login time, which must stay a time clients can read. */
export const NODE_EXPIRY_MAX_MS = 36_500 * 86_400_000;

/** net: the keys of a PostgreSQL or MySQL/MariaDB connection, under `prefix`. */
const net = <P extends string>(prefix: P, port: number, name: string) => prefixed(prefix, {
  host: text({ default: '127.0.0.1', doc: `${name} server host` }),
  port: int({ default: port, min: 1, max: 65535, doc: `${name} server port` }),
  name: text({ default: 'headway', doc: 'database name' }),
  user: text({ default: 'headway', doc: 'user name' }),
  pass: text({ default: '', empty: true, doc: 'password' }),
  max_open_conns: int({ default: 10, min: 1, max: 1000, doc: 'largest pool size' }),
  max_idle_conns: int({ default: 10, min: 0, max: 1000, doc: 'connections kept open when idle' }),
  conn_max_idle_time_secs: int({ default: 3600, min: 0, doc: 'seconds before an idle connection closes' }),
  ssl: ssl({ default: false, doc: 'false, true, or a mode (require, verify-ca, verify-full)' }),
});

type Prefixed<P extends string, T> = { [K in keyof T & string as `${P}.${K}`]: T[K] };

/** prefixed names every key of `keys` `prefix.key`. */
function prefixed<P extends string, T extends Record<string, KeySpec>>(prefix: P, keys: T): Prefixed<P, T> {
  // Object.fromEntries cannot carry the renamed keys' types; Prefixed<P, T> is the same renaming done on the type.
  return Object.fromEntries(Object.entries(keys).map(([k, spec]) => [`${prefix}.${k}`, spec])) as Prefixed<P, T>;
}

const TABLE = {
  data_dir: path({ default: '', empty: true, doc: 'directory for the database, keys and socket when their paths are relative or unset (default: ~/.local/share/headway)' }),
  server_url: url({ default: 'http://127.0.0.1:8080', doc: 'the URL devices use to reach this server (tailscale up --login-server)' }),
  listen_addr: addr({ default: '127.0.0.1:8080', doc: 'HTTP listener: the control protocol, the API, the register page' }),
  metrics_listen_addr: addr({ default: '127.0.0.1:9090', empty: true, doc: 'Prometheus /metrics listener; empty disables it' }),
  grpc_listen_addr: addr({ default: '127.0.0.1:50443', empty: true, doc: "headscale's gRPC API (headscale.v1.HeadscaleService, for headscale's CLI in remote mode and gRPC clients; calls need an API key); TLS with tls_cert_path/tls_key_path, plaintext only on a loopback address or with grpc_allow_insecure; empty disables it" }),
  grpc_allow_insecure: bool({ default: false, doc: 'serve the gRPC API without TLS on a non-loopback grpc_listen_addr (TLS terminated in front of Headway); API keys then cross the network in the clear' }),
  trusted_proxies: proxies({ default: [], doc: 'reverse proxies (addresses or CIDR prefixes such as 127.0.0.1/32) whose True-Client-IP, X-Real-IP and X-Forwarded-For headers name the client; per-address limits and logs then use that client, and the same headers from any other peer are ignored; empty: the TCP peer is the client' }),
  'noise.private_key_path': path({ default: 'noise_private.key', doc: 'the control key (generated on first start); relative to data_dir' }),
  'noise.handshake_timeout': duration({ min: 100, default: 10_000, doc: 'longest time from TCP accept (or from a response on a kept-alive connection) to a complete request or ts2021 upgrade, on listen_addr and metrics_listen_addr, and to a complete request head (the TLS handshake included) on the relay\'s own port (derp.server.tls_listen_addr); 0 disables' }),
  'noise.first_request_timeout': duration({ min: 100, default: 30_000, doc: 'longest time from a finished Noise handshake to its first HTTP/2 request, and for any request body to arrive in full; 0 disables' }),
  'noise.idle_timeout': duration({ min: 100, default: 5 * 60_000, doc: 'a Noise connection with no open request (a map long-poll is open) is closed after this long; 0 disables' }),
  'noise.max_unauthenticated_sessions': int({ default: 50_000, min: 1, doc: 'open Noise sessions whose machine key has no registered node, server-wide' }),
  'noise.max_unauthenticated_sessions_per_address': int({ default: 10_000, min: 1, doc: 'the same per source address (an IPv4 address or an IPv6 /64); sized so a 10,000-device fleet behind one NAT can enroll at once' }),
  'noise.handshake_rate': int({ default: 200, min: 1, doc: 'Noise handshakes per second one source address may start, sustained (token bucket refill); excess get HTTP 429' }),
  'noise.handshake_burst': int({ default: 2000, min: 1, doc: 'handshakes one source address may start at once (token bucket size)' }),
  'noise.replay_window': duration({ default: 10 * 60_000, doc: 'how long accepted handshake initiations are remembered so a replayed one is refused before any key agreement' }),
  'registration.pending_expiry': duration({ default: 15 * 60_000, doc: 'an interactive login (AuthURL) not approved within this time is forgotten' }),
  'registration.max_pending': int({ default: 10_000, min: 1, doc: 'interactive logins waiting for approval, server-wide (every instance sharing the database counted)' }),
  'registration.max_pending_per_address': int({ default: 1000, min: 1, doc: 'the same per source address (a machine key holds one per node key and three in all: a new login replaces its oldest)' }),
  'registration.max_hostinfo_bytes': int({ default: 65_536, min: 1024, doc: 'largest device description (Hostinfo JSON) stored with a waiting login' }),
  'registration.gc_interval': duration({ min: 100, default: 60_000, doc: 'how often expired waiting logins are deleted from the database; 0 turns the sweep off' }),
  'prefixes.v4': cidr({ default: '100.64.0.0/10', empty: true, doc: 'IPv4 range nodes get addresses from; empty disables IPv4' }),
  'prefixes.v6': cidr({ default: 'fd7a:115c:a1e0::/48', empty: true, doc: 'IPv6 range nodes get addresses from; empty disables IPv6' }),
  'prefixes.allocation': oneOf({ values: ['sequential', 'random'], default: 'sequential', doc: 'how addresses are picked' }),
  'derp.server.enabled': bool({ default: true, doc: 'run the embedded DERP relay on listen_addr at /derp (on by default: with no public DERP map configured, devices need a relay to come up)' }),
  'derp.server.region_id': int({ default: 999, min: 1, max: 65535, doc: 'region id of the embedded relay' }),
  'derp.server.region_code': text({ default: 'headway', doc: 'region code of the embedded relay' }),
  'derp.server.region_name': text({ default: 'Headway Embedded DERP', doc: 'region name of the embedded relay' }),
  'derp.server.verify_clients': bool({ default: true, doc: 'admit only registered, unexpired nodes to the relay' }),
  'derp.server.stun_listen_addr': addr({ default: '127.0.0.1:3478', empty: true, doc: 'UDP address of the STUN server; loopback like listen_addr by default (0.0.0.0:3478 to serve other machines); empty disables STUN' }),
  'derp.server.tls_listen_addr': addr({ default: '', empty: true, doc: 'TLS port of the relay when server_url is http:// and tls_cert_path is unset (clients dial DERP only over TLS; a self-signed certificate in data_dir is pinned in the DERP map); the port also accepts plain HTTP; empty: listen_addr\'s host, on a port picked at start-up (set a fixed one to open it in a firewall)' }),
  'derp.server.max_unauthenticated_connections_per_address': int({ default: 1000, min: 1, doc: 'relay connections from one source address (an IPv4 address or an IPv6 /64) that have not logged in yet; more get HTTP 429. A device is in that state for one round trip, so a fleet behind one NAT reconnecting at once stays far below it, while it bounds what one address can hold open until the 10 s login deadline' }),
  'derp.server.login_rate': int({ default: 100, min: 1, doc: 'relay logins per second one source address may attempt, sustained (token bucket refill); each costs the server about a millisecond of public-key crypto, so this bounds one address to about a tenth of a core, and a 10,000-device fleet behind one NAT is back in under two minutes after a restart' }),
  'derp.server.login_burst': int({ default: 1000, min: 1, doc: 'relay logins one source address may attempt at once (token bucket size), so a fleet of up to 1,000 devices behind one NAT reconnects at once; logins past the rate are refused (connection closed) before any crypto, and clients retry' }),
  'derp.server.private_key_path': path({ default: 'derp_server_private.key', doc: 'the relay key (generated on first start); relative to data_dir' }),
  'derp.server.automatically_add_embedded_derp_region': bool({ default: true, doc: 'add the embedded relay to every node DERP map' }),
  'derp.server.ipv4': text({ default: '', empty: true, doc: 'public IPv4 of the relay advertised to clients' }),
  'derp.server.ipv6': text({ default: '', empty: true, doc: 'public IPv6 of the relay advertised to clients' }),
  'derp.urls': strings({ default: [], doc: 'DERP map JSON URLs to merge (none by default: nothing outside this machine is fetched unless configured)' }),
  'derp.paths': strings({ default: [], doc: 'DERP map files (YAML or JSON) to merge' }),
  'derp.auto_update_enabled': bool({ default: true, doc: 're-read derp.urls and derp.paths periodically' }),
  'derp.update_frequency': duration({ min: 10_000, default: 3 * 3600_000, doc: 'how often to re-read them' }),
  disable_check_updates: bool({ default: true, doc: 'accepted for headscale compatibility: Headway never checks for updates; false is a config check warning' }),
  'node.expiry': duration({ max: NODE_EXPIRY_MAX_MS, default: 0, doc: 'how long a node key is valid after login; 0 means no expiry' }),
  'node.ephemeral.inactivity_timeout': duration({ default: 30 * 60_000, doc: 'ephemeral nodes are deleted after this long without a session' }),
  'node.routes.ha.probe_interval': duration({ min: 2000, default: 10_000, doc: 'how often every router of a subnet route that two or more online routers serve is asked to answer a ping; 0 turns probing off (the route then moves only when its primary disconnects)' }),
  'node.routes.ha.probe_timeout': duration({ min: 1000, default: 5000, doc: 'a router that has not answered within this long is unhealthy and its routes move to a healthy router; less than probe_interval' }),
  'database.type': text({ default: 'sqlite', doc: 'sqlite | postgres | mysql | an npm package name providing a storage adapter' }),
  'database.debug': bool({ default: false, doc: 'log every SQL statement at debug level (bound values never shown); log.level trace logs them too' }),
  'database.sqlite.path': path({ default: 'db.sqlite', doc: 'SQLite file; relative to data_dir' }),
  'database.sqlite.write_ahead_log': bool({ default: true, doc: 'use WAL journaling' }),
  'database.sqlite.wal_autocheckpoint': int({ default: 1000, min: 0, doc: 'pages between WAL checkpoints' }),
  'database.sqlite.synchronous': oneOf({ values: ['normal', 'full'], default: 'normal', doc: 'with WAL: normal syncs at checkpoints only (an OS crash or power loss may lose the last commits, never corrupts); full syncs every commit, blocking the server ~2 ms per write on a typical disk' }),
  ...net('database.postgres', 5432, 'PostgreSQL'),
  ...net('database.mysql', 3306, 'MySQL/MariaDB'),
  'cluster.enabled': bool({ default: false, doc: 'run as one of several instances sharing one PostgreSQL or MySQL/MariaDB database (not SQLite); every instance needs the same noise private key' }),
  'cluster.advertise_addr': text({ default: '', empty: true, doc: 'how other instances and `headway cluster status` name this instance (host:port, or http(s)://host:port); the other instances\' relays mesh with this one\'s at /derp there, so it must be reachable from them (with https, by a name its certificate covers); empty: the address listen_addr is bound to' }),
  'cluster.heartbeat_interval': duration({ default: 2000, doc: 'how often an instance writes its heartbeat row' }),
  'cluster.instance_timeout': duration({ default: 10_000, doc: 'an instance whose heartbeat is older than this is dead: its devices count as offline and its jobs move to another instance' }),
  'cluster.poll_interval': duration({ default: 200, doc: 'MySQL/MariaDB: how often the change log is read for other instances\' changes (PostgreSQL is told at once through LISTEN/NOTIFY)' }),
  'cluster.change_retention': duration({ default: 10 * 60_000, doc: 'MySQL/MariaDB: how long change-log rows are kept before they are pruned' }),
  tls_cert_path: path({ default: '', empty: true, doc: 'PEM certificate: serve HTTPS on listen_addr' }),
  tls_key_path: path({ default: '', empty: true, doc: 'PEM private key for tls_cert_path' }),
  'memory.heap_limit_mb': int({ default: 0, min: 0, max: 1_048_576, doc: "the JavaScript heap's limit in MiB (V8's old generation, --max-old-space-size); 0: 1024, or less where Node sizes it smaller from the machine's or the container's memory; about 30 KiB per connected device are live, so raise it past ~20,000 devices" }),
  // Let's Encrypt (ACME) for listen_addr's own certificate: headscale's keys, on when tls_letsencrypt_hostname is set.
  tls_letsencrypt_hostname: text({ default: '', empty: true, doc: 'obtain and renew the TLS certificate for this host name from an ACME CA (Let\'s Encrypt by default) and serve HTTPS on listen_addr with it; server_url must be https:// with this host; exclusive with tls_cert_path' }),
  tls_letsencrypt_cache_dir: path({ default: 'cache', doc: 'directory for the ACME account key, the certificate and its key (files 0600); relative to data_dir' }),
  tls_letsencrypt_challenge_type: oneOf({ values: ['HTTP-01', 'TLS-ALPN-01'], default: 'HTTP-01', doc: 'how the CA checks the host name: HTTP-01 (a plain HTTP listener on tls_letsencrypt_listen, which redirects everything else to https) or TLS-ALPN-01 (answered on listen_addr, which the CA reaches on port 443)' }),
  tls_letsencrypt_listen: text({ default: ':http', doc: 'HTTP-01 listener (host:port; :http is port 80): answers /.well-known/acme-challenge/ and redirects every other request to server_url' }),
  acme_url: url({ default: 'https://acme-v02.api.letsencrypt.org/directory', doc: 'the ACME directory URL (used only with tls_letsencrypt_hostname); its HTTPS certificate is checked against the system roots plus NODE_EXTRA_CA_CERTS' }),
  acme_email: text({ default: '', empty: true, doc: 'contact e-mail address given to the CA with the account (expiry notices); empty registers without one' }),
  'log.level': oneOf({ values: ['trace', 'debug', 'info', 'warn', 'error'], default: 'info', doc: 'log level' }),
  'log.format': oneOf({ values: ['text', 'json'], default: 'text', doc: 'log format' }),
  'policy.mode': text({ default: 'file', doc: 'file | database | an npm package name providing a policy source' }),
  'policy.path': path({ default: '', empty: true, doc: 'HuJSON policy file (file mode); empty means no policy: every node may reach every node' }),
  'dns.mode': oneOf({ values: ['file', 'database'], default: 'file', doc: 'where nameservers, split DNS, search domains, magic_dns and override_local_dns live: file (these dns.* keys) or database (seeded from them once, then changed through /api/v2)' }),
  'dns.magic_dns': bool({ default: true, doc: 'give every node a name under base_domain' }),
  'dns.base_domain': text({ default: 'headway.net', empty: true, doc: 'the MagicDNS domain (must not contain server_url host)' }),
  'dns.override_local_dns': bool({ default: false, doc: 'make devices use the global nameservers for everything' }),
  'dns.nameservers.global': strings({ default: [], doc: 'nameserver IPs or DoH URLs for all queries' }),
  'dns.nameservers.split': split({ default: {}, doc: 'domain → nameservers for that domain only' }),
  'dns.search_domains': strings({ default: [], doc: 'extra search domains' }),
  'dns.extra_records': records({ default: [], doc: 'extra A/AAAA records ({name, type, value})' }),
  'dns.extra_records_path': path({ default: '', empty: true, doc: 'JSON file of extra records, re-read when it changes' }),
  'dns.certificates.enabled': bool({ default: false, doc: 'device HTTPS certificates (`tailscale cert`, `tailscale serve`): each device may publish the ACME DNS-01 TXT record of its own MagicDNS name through a dns plugin that publishes TXT records (setTxt/removeTxt); needs dns.magic_dns and dns.base_domain' }),
  'dns.certificates.txt_lifetime': duration({ min: 10_000, default: 10 * 60_000, doc: 'how long a published _acme-challenge TXT value stays before it is removed (an ACME CA validates within seconds of the device\'s request)' }),
  plugins: plugins({ default: [], doc: 'extra adapters, each {package, port, options}: port dns (several merge their records in this order; one of them may publish the ACME records of dns.certificates) or drive (Taildrive grants beyond the policy, several apply in this order; @headway/drive-db keeps them in the database for headway drive); options are checked by the plugin; storage and policy come from database.type and policy.mode' }),
  unix_socket: path({ default: 'headway.sock', doc: 'local API socket for the CLI; relative to data_dir' }),
  unix_socket_permission: filemode({ default: '0770', doc: 'file mode of the socket (octal)' }),
  'auto_update.enabled': bool({ default: false, doc: 'accepted for headscale compatibility, not implemented: clients are never told to update themselves; true is a config check warning' }),
  'logtail.enabled': bool({ default: false, doc: 'accepted for headscale compatibility, not implemented: clients are never told to upload logs; true is a config check warning' }),
  'taildrop.enabled': bool({ default: true, doc: 'allow file sharing between a user\'s devices' }),
  'cli.address': text({ default: '', empty: true, doc: 'remote server for the CLI (http[s]://host:port); empty uses the local socket' }),
  'cli.api_key': text({ default: '', empty: true, doc: 'API key for cli.address' }),
  'cli.timeout': duration({ default: 10_000, doc: 'CLI request timeout' }),
  'cli.insecure': bool({ default: false, doc: 'skip TLS verification for cli.address' }),
  // Sign-in with an identity provider: headscale's oidc keys, on when oidc.issuer is set.
  'oidc.only_start_if_oidc_is_available': bool({ default: true, doc: 'refuse to start when the provider cannot be reached at start-up (false: start anyway and retry discovery at each login)' }),
  'oidc.issuer': text({ default: '', empty: true, doc: 'the provider\'s issuer URL (its /.well-known/openid-configuration is read); empty turns sign-in with a provider off' }),
  'oidc.client_id': text({ default: '', empty: true, doc: 'the client id registered at the provider (redirect URI: <server_url>/oidc/callback)' }),
  'oidc.client_secret': text({ default: '', empty: true, doc: 'the client secret (never logged); or use client_secret_path' }),
  'oidc.client_secret_path': path({ default: '', empty: true, doc: 'file holding the client secret (${VAR} expanded, whitespace trimmed); exclusive with client_secret' }),
  'oidc.scope': strings({ default: ['openid', 'profile', 'email'], doc: 'scopes requested (add groups when the provider needs a scope for the groups claim)' }),
  'oidc.extra_params': params({ default: {}, doc: 'extra query parameters for the authorization request (e.g. domain_hint: example.com)' }),
  'oidc.allowed_domains': strings({ default: [], doc: 'only e-mail addresses in these domains may log in' }),
  'oidc.allowed_groups': strings({ default: [], doc: 'only members of one of these provider groups (groups claim) may log in' }),
  'oidc.allowed_users': strings({ default: [], doc: 'only these e-mail addresses may log in' }),
  'oidc.email_verified_required': bool({ default: true, doc: 'an unverified e-mail address is not trusted for allowed_domains/allowed_users nor stored' }),
  'oidc.pkce.enabled': bool({ default: false, doc: 'use PKCE (RFC 7636) in the authorization code flow' }),
  'oidc.pkce.method': oneOf({ values: ['S256', 'plain'], default: 'S256', doc: 'PKCE challenge method' }),
  'oidc.use_expiry_from_token': bool({ default: false, doc: 'a node logged in through the provider expires with the ID token instead of after node.expiry' }),
  'oidc.policy_groups': bool({ default: false, doc: 'a policy group (group:NAME, declared in groups) also holds every user whose provider groups claim has NAME' }),
  // Who may read /v1/metrics on listen_addr (headscale answers 404 there; its metrics live on metrics_listen_addr only).
  'metrics.public_endpoint': bool({ default: true, doc: 'serve /v1/metrics (counts of users, nodes and keys) on listen_addr; false answers 404 there (metrics_listen_addr is unaffected)' }),
  'metrics.require_api_key': bool({ default: true, doc: '/v1/metrics on listen_addr needs an API key (Authorization: Bearer); false opens it to anyone who reaches listen_addr. metrics_listen_addr stays open' }),
  'metrics.headscale_names': bool({ default: true, doc: "also publish headscale's metric names (headscale_nodestore_nodes, headscale_mapresponse_*, process_*) for its dashboards (docs/administer.md, Metrics, maps them)" }),
  // Web pages on other origins (a web UI such as headscale-ui served elsewhere) calling /api/v1 from the browser.
  'audit.retention': duration({ max: NODE_EXPIRY_MAX_MS, default: 365 * 86_400_000, doc: 'audit log entries (who changed what, when, from where) older than this are deleted, hourly; 0 keeps every entry' }),
  'admin.enabled': bool({ default: true, doc: 'serve the admin console at <server_url>/admin (sign-in by a link from `headway console link`, or through oidc for the admins listed below)' }),
  'admin.allowed_users': strings({ default: [], doc: 'e-mail addresses that may sign in to the console through the oidc provider' }),
  'admin.allowed_groups': strings({ default: [], doc: 'provider groups (groups claim) whose members may sign in to the console through the oidc provider' }),
  'admin.allowed_domains': strings({ default: [], doc: 'e-mail domains whose users may sign in to the console through the oidc provider' }),
  'admin.link_lifetime': duration({ positive: true, min: 10_000, max: 86_400_000, default: 10 * 60_000, doc: 'a sign-in link from `headway console link` works once, within this long' }),
  'admin.session_idle_timeout': duration({ positive: true, min: 60_000, max: 7 * 86_400_000, default: 30 * 60_000, doc: 'a console session unused for this long ends' }),
  'admin.session_max_age': duration({ positive: true, min: 60_000, max: 30 * 86_400_000, default: 12 * 3_600_000, doc: 'a console session ends this long after sign-in, however busy (at least admin.session_idle_timeout)' }),
  'api.cors.allowed_origins': origins({ default: [], doc: 'origins (https://ui.example.com, exact: scheme, host, port) whose pages may call /api/v1 from a browser (CORS); empty allows none' }),
};

/** ConfigKey is the dotted name of a key (`noise.idle_timeout`), as written in messages and environment names. */
export type ConfigKey = keyof typeof TABLE;

/** ConfigValues holds every key's value by its dotted name, each of the type its descriptor carries. */
export type ConfigValues = { -readonly [N in ConfigKey]: ValueOf<(typeof TABLE)[N]> };

/** KEYS: the table, typed so that KEYS[name] for a generic name N is known to check into ConfigValues[N]. */
export const KEYS: { readonly [N in ConfigKey]: KeySpec<ConfigValues[N]> } = TABLE;

export function isConfigKey(key: string): key is ConfigKey {
  // Own keys only: `__proto__`, `toString` and the like are unknown keys, not inherited ones.
  return Object.hasOwn(KEYS, key);
}

/** CONFIG_KEYS lists every key in table order (the order of config.example.yaml and of the problems reported). */
export const CONFIG_KEYS: readonly ConfigKey[] = Object.keys(KEYS).filter(isConfigKey);
