import { existsSync } from 'node:fs';
import { formatDuration } from './duration.js';
import { formatPrefix, parseIP, parseIPPrefix, prefixOverlaps } from '@headway/policy/ip';
import type { ConfigValues } from './keys.js';
import type { ConfigProblem } from './problems.js';
import { isDomainName, isLoopbackHost, nameserverProblem, PACKAGE_NAME, parseHostPort, searchDomainProblem } from './syntax.js';

/*
 * Checks across keys, run once every key holds a value of its own kind: settings that contradict each other, and
 * values whose meaning depends on another key (a MagicDNS domain and the server's own host name).
 */

type Values = Readonly<ConfigValues>;

/**
 * grpcPlaintextProblem says why grpc_listen_addr may not serve plaintext: API keys
 * would cross the network in the clear. Plaintext is fine on a loopback address or
 * when grpc_allow_insecure says so (TLS terminated in front, a trusted network);
 * with tls_cert_path or tls_letsencrypt_hostname set the listener uses TLS and there is no problem.
 */
export function grpcPlaintextProblem(values: { grpc_listen_addr: string; grpc_allow_insecure: boolean; tls_cert_path: string; tls_letsencrypt_hostname?: string }): string | undefined {
  const addr = values.grpc_listen_addr;
  if (!addr || values.tls_cert_path || values.tls_letsencrypt_hostname || values.grpc_allow_insecure) return undefined;
  const hp = parseHostPort(addr);
  if (!hp || isLoopbackHost(hp.host)) return undefined;
  return `${addr} is not a loopback address and no TLS is configured: gRPC would carry API keys in the clear. `
    + 'Set tls_cert_path and tls_key_path, set grpc_allow_insecure: true (TLS terminated in front of Headway), '
    + 'or listen on 127.0.0.1; an empty grpc_listen_addr turns the gRPC API off';
}

export function crossCheck(values: Values, problems: ConfigProblem[]): void {
  const err = (key: string, message: string) => problems.push({ level: 'error', key, message });
  if (values['dns.magic_dns'] && !values['dns.base_domain']) {
    err('dns.base_domain', 'must be set when dns.magic_dns is true');
  }
  const base = values['dns.base_domain'];
  if (base && (!/^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i.test(base) || !isDomainName(base))) {
    err('dns.base_domain', `expected a domain name such as example.net, found ${JSON.stringify(base)}`);
  }
  try {
    const host = new URL(values.server_url).hostname.toLowerCase();
    if (base && (host === base.toLowerCase() || host.endsWith('.' + base.toLowerCase()))) {
      err('dns.base_domain', `server_url host ${host} must not be inside the MagicDNS domain ${base}: devices would resolve the server through MagicDNS`);
    }
  } catch { /* server_url already reported */ }
  if (values['dns.certificates.enabled']) {
    if (!values['dns.magic_dns'] || !base) err('dns.certificates.enabled', 'needs dns.magic_dns: true and dns.base_domain set: a certificate names a device by its MagicDNS name');
    if (!values.plugins.some((p) => p.port === 'dns')) {
      err('dns.certificates.enabled', 'needs a plugins: entry with port dns that publishes TXT records (such as @headway/dns-rfc2136) for the ACME DNS-01 challenge');
    }
  }
  if (values['dns.extra_records'].length && values['dns.extra_records_path']) {
    err('dns.extra_records', 'cannot be used together with dns.extra_records_path; keep one');
  }
  if (Boolean(values.tls_cert_path) !== Boolean(values.tls_key_path)) {
    err(values.tls_cert_path ? 'tls_key_path' : 'tls_cert_path', 'tls_cert_path and tls_key_path must be set together');
  }
  if (values['admin.session_idle_timeout'] > values['admin.session_max_age']) {
    err('admin.session_idle_timeout', `${formatDuration(values['admin.session_idle_timeout'])} is longer than admin.session_max_age `
      + `(${formatDuration(values['admin.session_max_age'])}): a session always ends at its maximum age, so the idle timeout must not exceed it`);
  }
  const grpc = grpcPlaintextProblem(values);
  if (grpc) err('grpc_listen_addr', grpc);
  const v4 = values['prefixes.v4'], v6 = values['prefixes.v6'];
  if (!v4 && !v6) err('prefixes', 'at least one of prefixes.v4 and prefixes.v6 must be set');
  if (v4 && parseIPPrefix(v4)?.family !== 4) err('prefixes.v4', `expected an IPv4 prefix, found ${JSON.stringify(v4)}`);
  else if (v4) checkNodePrefix('prefixes.v4', v4, problems);
  if (v6 && parseIPPrefix(v6)?.family !== 6) err('prefixes.v6', `expected an IPv6 prefix, found ${JSON.stringify(v6)}`);
  else if (v6) checkNodePrefix('prefixes.v6', v6, problems);
  for (const ns of values['dns.nameservers.global']) {
    const problem = nameserverProblem(ns);
    if (problem) err('dns.nameservers.global', problem);
  }
  for (const d of values['dns.search_domains']) {
    const problem = searchDomainProblem(d);
    if (problem) err('dns.search_domains', problem);
  }
  for (const [key, family] of [['derp.server.ipv4', 4], ['derp.server.ipv6', 6]] as const) {
    const ip = values[key];
    if (ip && parseIP(ip)?.family !== family) err(key, `expected an IPv${family} address, found ${JSON.stringify(ip)}`);
  }
  for (const u of values['derp.urls']) {
    if (!/^https?:\/\/[^\s/?#]+/i.test(u) || !URL.canParse(u)) err('derp.urls', `expected http:// or https:// URLs of DERP maps, found ${JSON.stringify(u)}`);
  }
  const dbType = values['database.type'];
  if (dbType === 'postgres' || dbType === 'mysql') {
    const host = values[`database.${dbType}.host`];
    // A connection URL pasted here (often with its password) would be echoed back by the driver's errors.
    if (/:\/\/|@|\s/.test(host)) err(`database.${dbType}.host`, 'expected a host name, an IP address or a socket directory, found a connection URL or user@host (set host, port, name, user and pass apart)');
  }
  const haInterval = values['node.routes.ha.probe_interval'], haTimeout = values['node.routes.ha.probe_timeout'];
  if (haInterval > 0 && haTimeout >= haInterval) {
    err('node.routes.ha.probe_timeout', `must be less than node.routes.ha.probe_interval (${formatDuration(haTimeout)} is not less than ${formatDuration(haInterval)})`);
  } else if (haInterval > 0 && haTimeout === 0) {
    err('node.routes.ha.probe_timeout', 'must be at least 1s while node.routes.ha.probe_interval is on');
  }
  if (values['cluster.enabled'] && values['database.type'] === 'sqlite') {
    err('cluster.enabled', 'needs database.type postgres or mysql: several instances cannot share one SQLite file');
  }
  if (values['cluster.enabled']) {
    const beat = values['cluster.heartbeat_interval'], timeout = values['cluster.instance_timeout'];
    if (beat <= 0) err('cluster.heartbeat_interval', 'must be longer than 0');
    if (timeout < 2 * beat) err('cluster.instance_timeout', `must be at least twice cluster.heartbeat_interval (${beat} ms), found ${timeout} ms`);
    if (values['cluster.poll_interval'] <= 0) err('cluster.poll_interval', 'must be longer than 0');
  }
  for (const key of ['database.type', 'policy.mode'] as const) {
    const id = values[key];
    if (!PACKAGE_NAME.test(id)) {
      err(key, `expected an adapter id or npm package name, found ${JSON.stringify(id)}`);
    }
  }
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
  const p = parseIPPrefix(text)!;
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
    const q = parseIPPrefix(r.prefix)!;
    if (prefixOverlaps(p, q)) {
      problems.push({ level: 'error', key, message: `${text} overlaps ${r.prefix} (${r.what}): devices cannot use addresses there` });
      return;
    }
  }
  const ts = parseIPPrefix(TAILSCALE_RANGES[p.family])!;
  if (!(prefixOverlaps(p, ts) && p.bits >= ts.bits)) {
    problems.push({ level: 'warn', key, message: `${text} is outside ${TAILSCALE_RANGES[p.family]}, the range Tailscale clients expect tailnet addresses in: some client features may not work` });
  }
}

/** OIDC_RESERVED_PARAMS are set by the code flow itself; oidc.extra_params must not override them. */
const OIDC_RESERVED_PARAMS = ['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'nonce', 'code_challenge', 'code_challenge_method'];

/** checkOidc validates the oidc block when oidc.issuer turns it on, as headscale does; run after paths are resolved. */
export function checkOidc(values: Values, problems: ConfigProblem[]): void {
  const err = (key: string, message: string) => problems.push({ level: 'error', key, message });
  const issuer = values['oidc.issuer'];
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
  const secretPath = values['oidc.client_secret_path'];
  if (secretPath && !existsSync(secretPath)) err('oidc.client_secret_path', `${secretPath} does not exist`);
  if (!values['oidc.scope'].includes('openid')) err('oidc.scope', 'must include openid');
  for (const k of Object.keys(values['oidc.extra_params'])) {
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
export function checkServerUrl(values: Values, problems: ConfigProblem[]): void {
  if (values['cluster.enabled']) return;
  let url: URL;
  try { url = new URL(values.server_url); } catch { return; }
  const listen = parseHostPort(values.listen_addr);
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
