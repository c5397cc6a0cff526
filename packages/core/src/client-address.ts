import { parseIP, parseIPPrefix, prefixContains, formatIP, type IPAddr, type Prefix } from '@headway/policy/ip';

/*
 * The client's address behind reverse proxies (trusted_proxies). A request's forwarded headers are believed
 * only when its TCP peer is a listed proxy; from anyone else they are ignored. Believed headers are read as
 * headscale reads them: True-Client-IP, then X-Real-IP (each one address; the last copy when repeated),
 * then X-Forwarded-For walked from the right past the listed proxies, the first address not listed being the
 * client. A header that names no usable address leaves the choice to the next one; when none does, the
 * client is the peer.
 */

/** HeaderBag is a request's headers by lower-case name, as Node's `headers` or `headersDistinct` hold them. */
export type HeaderBag = Readonly<Record<string, string | readonly string[] | undefined>>;

/** TrustedProxies are the parsed trusted_proxies prefixes (IPv4-mapped IPv6 prefixes as IPv4 ones). */
export type TrustedProxies = readonly Prefix[];

const MAPPED_BASE = 0xffffn << 32n;

/** unmap turns an IPv4-mapped IPv6 address (::ffff:a.b.c.d, as a dual-stack socket reports IPv4 peers) into IPv4. */
function unmap(ip: IPAddr): IPAddr {
  return ip.family === 6 && ip.value >> 32n === 0xffffn ? { family: 4, value: ip.value - MAPPED_BASE } : ip;
}

/**
 * parseTrustedProxy reads one trusted_proxies entry: a CIDR prefix (host bits are masked off) or a bare
 * address (a single host). A zero-length prefix would trust every peer and is refused. Returns the prefix or
 * why the entry is wrong.
 */
export function parseTrustedProxy(entry: string): Prefix | string {
  const p = parseIPPrefix(entry.trim());
  if (!p) return 'expected an IP address or CIDR prefix such as 127.0.0.1/32 or 10.0.0.0/8';
  if (p.bits === 0) return 'a prefix of length 0 (0.0.0.0/0 or ::/0) would trust every peer\'s forwarded headers; list the proxies\' own addresses';
  if (p.family === 6 && p.bits >= 96 && p.base >> 32n === 0xffffn) return { family: 4, base: p.base - MAPPED_BASE, bits: p.bits - 96 };
  return p;
}

/** trustedProxies parses a checked trusted_proxies list (config validation refused any bad entry). */
export function trustedProxies(list: readonly string[]): TrustedProxies {
  return list.map((entry) => {
    const p = parseTrustedProxy(entry);
    if (typeof p === 'string') throw new Error(`trusted_proxies: ${JSON.stringify(entry)}: ${p}`);
    return p;
  });
}

function isTrusted(ip: IPAddr, trusted: TrustedProxies): boolean {
  return trusted.some((p) => prefixContains(p, ip));
}

/**
 * parseForwarded reads one address as proxies write them: bare, with a port (1.2.3.4:80, [::1]:80), in
 * brackets, with a zone (dropped). The unspecified addresses (0.0.0.0, ::) name nobody and are refused.
 */
export function parseForwarded(text: string): IPAddr | undefined {
  let s = text.trim();
  const v4port = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(s);
  const v6port = /^\[([^\]]+)\]:\d+$/.exec(s);
  if (v4port) s = v4port[1]!;
  else if (v6port) s = v6port[1]!;
  else if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const zone = s.lastIndexOf('%');
  if (zone > 0) s = s.slice(0, zone);
  const ip = parseIP(s);
  if (!ip || ip.value === 0n) return undefined;
  return unmap(ip);
}

function values(headers: HeaderBag, name: string): readonly string[] {
  const v = headers[name];
  return v === undefined ? [] : typeof v === 'string' ? [v] : v;
}

/** single reads a one-address header: its last copy, when that is an address. */
function single(headers: HeaderBag, name: string): IPAddr | undefined {
  const all = values(headers, name);
  return all.length ? parseForwarded(all[all.length - 1]!) : undefined;
}

/** rightmostUntrusted walks X-Forwarded-For from the right past listed proxies; an unreadable entry there ends the walk with nothing. */
function rightmostUntrusted(headers: HeaderBag, trusted: TrustedProxies): IPAddr | undefined {
  const hops = values(headers, 'x-forwarded-for').flatMap((h) => h.split(','));
  for (let i = hops.length - 1; i >= 0; i--) {
    const ip = parseForwarded(hops[i]!);
    if (ip && isTrusted(ip, trusted)) continue;
    return ip;
  }
  return undefined;
}

/**
 * clientAddress is the address a request is charged to and logged as: from the forwarded headers when the
 * TCP peer is a trusted proxy, else the peer itself (IPv4-mapped peers as IPv4). Undefined when the peer is
 * unknown (a socket already closed).
 */
export function clientAddress(peer: string | undefined, headers: HeaderBag, trusted: TrustedProxies): string | undefined {
  if (!peer) return undefined;
  // No list: no header is read, and the peer's text only loses an IPv4-mapped prefix.
  if (!trusted.length) return /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(peer) ? peer.slice(7) : peer;
  const zone = peer.lastIndexOf('%');
  const parsed = parseIP(zone > 0 ? peer.slice(0, zone) : peer);
  if (!parsed) return peer;
  const ip = unmap(parsed);
  if (!isTrusted(ip, trusted)) return formatIP(ip);
  const forwarded = single(headers, 'true-client-ip') ?? single(headers, 'x-real-ip') ?? rightmostUntrusted(headers, trusted);
  return formatIP(forwarded ?? ip);
}

/** RequestLike is what clientAddressOf needs of a Node request. */
export interface RequestLike {
  socket?: { remoteAddress?: string } | null;
  headers: HeaderBag;
  headersDistinct?: HeaderBag;
}

/**
 * clientAddressOf binds clientAddress to the trusted list for Node requests (upgrades included). It reads
 * headersDistinct, so a repeated one-address header is seen as its copies rather than Node's comma-joined text.
 */
export function clientAddressOf(trusted: TrustedProxies): (req: RequestLike) => string | undefined {
  return (req) => clientAddress(req.socket?.remoteAddress, req.headersDistinct ?? req.headers, trusted);
}
