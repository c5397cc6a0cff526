import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { randomBytes } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import { crc32 as zlibCrc32 } from 'node:zlib';

const HEADER_LENGTH = 20;
const MAGIC_COOKIE = Buffer.from('2112a442', 'hex');
const BINDING_REQUEST = 0x0001;
const BINDING_SUCCESS = 0x0101;
const ATTR_XOR_MAPPED_ADDRESS = 0x0020;
const ATTR_SOFTWARE = 0x8022;
const ATTR_FINGERPRINT = 0x8028;
const FINGERPRINT_XOR = 0x5354554e;

/**
 * crc32 is the IEEE CRC-32 that STUN's FINGERPRINT attribute is based on; node:zlib
 * computes it natively (kept as an export: tests and callers check vectors with it).
 */
export function crc32(data: Uint8Array): number {
  return zlibCrc32(data) >>> 0;
}

function fingerprint(data: Uint8Array): number {
  return (crc32(data) ^ FINGERPRINT_XOR) >>> 0;
}

/**
 * parseBindingRequest returns the 12-byte transaction id of a well-formed RFC
 * 5389 binding request, or null for anything else: wrong type, bad cookie, a
 * length field that disagrees with the datagram, malformed attributes, or a
 * FINGERPRINT that is present but wrong or not last.
 */
export function parseBindingRequest(packet: Uint8Array): Buffer | null {
  const b = Buffer.from(packet.buffer, packet.byteOffset, packet.byteLength);
  if (b.length < HEADER_LENGTH || (b[0]! & 0xc0) !== 0) return null;
  if (b.readUInt16BE(0) !== BINDING_REQUEST) return null;
  if (!b.subarray(4, 8).equals(MAGIC_COOKIE)) return null;
  const length = b.readUInt16BE(2);
  if (length % 4 !== 0 || HEADER_LENGTH + length !== b.length) return null;
  let offset = HEADER_LENGTH;
  while (offset < b.length) {
    if (offset + 4 > b.length) return null;
    const type = b.readUInt16BE(offset);
    const attrLength = b.readUInt16BE(offset + 2);
    const padded = (attrLength + 3) & ~3;
    if (offset + 4 + padded > b.length) return null;
    if (type === ATTR_FINGERPRINT) {
      if (attrLength !== 4 || offset + 8 !== b.length) return null;
      if (b.readUInt32BE(offset + 4) !== fingerprint(b.subarray(0, offset))) return null;
    }
    offset += 4 + padded;
  }
  return Buffer.from(b.subarray(8, 20));
}

/** buildBindingRequest makes the request tailscale sends: SOFTWARE "tailnode" and a FINGERPRINT. */
export function buildBindingRequest(transactionId: Uint8Array = randomBytes(12)): Buffer {
  if (transactionId.length !== 12) throw new Error('STUN transaction id must be 12 bytes');
  const software = Buffer.from('tailnode');
  const b = Buffer.alloc(HEADER_LENGTH + 4 + software.length + 8);
  b.writeUInt16BE(BINDING_REQUEST, 0);
  b.writeUInt16BE(4 + software.length + 8, 2);
  MAGIC_COOKIE.copy(b, 4);
  b.set(transactionId, 8);
  b.writeUInt16BE(ATTR_SOFTWARE, 20);
  b.writeUInt16BE(software.length, 22);
  software.copy(b, 24);
  const fpOffset = 24 + software.length;
  b.writeUInt16BE(ATTR_FINGERPRINT, fpOffset);
  b.writeUInt16BE(4, fpOffset + 2);
  b.writeUInt32BE(fingerprint(b.subarray(0, fpOffset)), fpOffset + 4);
  return b;
}

/** buildBindingResponse answers transactionId with one XOR-MAPPED-ADDRESS for address:port. */
export function buildBindingResponse(transactionId: Uint8Array, address: string, port: number): Buffer {
  const ip = ipBytes(address);
  const attrLength = 4 + ip.length;
  const b = Buffer.alloc(HEADER_LENGTH + 4 + attrLength);
  b.writeUInt16BE(BINDING_SUCCESS, 0);
  b.writeUInt16BE(4 + attrLength, 2);
  MAGIC_COOKIE.copy(b, 4);
  b.set(transactionId, 8);
  b.writeUInt16BE(ATTR_XOR_MAPPED_ADDRESS, 20);
  b.writeUInt16BE(attrLength, 22);
  b[24] = 0;
  b[25] = ip.length === 4 ? 0x01 : 0x02;
  b.writeUInt16BE(port ^ 0x2112, 26);
  const xorKey = Buffer.concat([MAGIC_COOKIE, transactionId]);
  for (let i = 0; i < ip.length; i++) b[28 + i] = ip[i]! ^ xorKey[i]!;
  return b;
}

/** StunMappedAddress is what a binding response reports back to the client. */
export interface StunMappedAddress {
  transactionId: Buffer;
  address: string;
  port: number;
  family: 'IPv4' | 'IPv6';
}

/** parseBindingResponse decodes a success response's XOR-MAPPED-ADDRESS, or returns null. */
export function parseBindingResponse(packet: Uint8Array): StunMappedAddress | null {
  const b = Buffer.from(packet.buffer, packet.byteOffset, packet.byteLength);
  if (b.length < HEADER_LENGTH || b.readUInt16BE(0) !== BINDING_SUCCESS || !b.subarray(4, 8).equals(MAGIC_COOKIE)) return null;
  const transactionId = Buffer.from(b.subarray(8, 20));
  const end = Math.min(b.length, HEADER_LENGTH + b.readUInt16BE(2));
  let offset = HEADER_LENGTH;
  while (offset + 4 <= end) {
    const type = b.readUInt16BE(offset);
    const len = b.readUInt16BE(offset + 2);
    const value = b.subarray(offset + 4, offset + 4 + len);
    if (type === ATTR_XOR_MAPPED_ADDRESS && value.length >= 8) {
      const family = value[1] === 0x01 ? 'IPv4' : value[1] === 0x02 ? 'IPv6' : null;
      const ipLength = family === 'IPv4' ? 4 : 16;
      if (!family || value.length < 4 + ipLength) return null;
      const xorKey = Buffer.concat([MAGIC_COOKIE, transactionId]);
      const ip = Buffer.alloc(ipLength);
      for (let i = 0; i < ipLength; i++) ip[i] = value[4 + i]! ^ xorKey[i]!;
      return { transactionId, port: value.readUInt16BE(2) ^ 0x2112, family, address: formatIp(ip) };
    }
    offset += 4 + ((len + 3) & ~3);
  }
  return null;
}

/**
 * StunServer answers STUN binding requests on UDP so clients can learn their
 * public address (netcheck). Anything that is not a valid binding request is
 * ignored silently, as a reply would make the server a reflector.
 */
export class StunServer {
  private socket: Socket | undefined;
  /** requestsAnswered and packetsIgnored count traffic, for tests and metrics. */
  requestsAnswered = 0;
  packetsIgnored = 0;

  /** listen binds udp4 or udp6 according to host (default 0.0.0.0) and resolves once bound, or serves `socket`, bound already. */
  async listen(options: { host?: string; port?: number; socket?: Socket } = {}): Promise<{ address: string; port: number }> {
    if (this.socket) throw new Error('StunServer is already listening');
    if (options.socket) {
      const bound = options.socket;
      bound.on('message', (msg: Buffer, rinfo: RemoteInfo) => this.onMessage(bound, msg, rinfo));
      bound.on('error', () => undefined);
      this.socket = bound;
      return this.address();
    }
    const host = options.host ?? '0.0.0.0';
    const port = options.port ?? 3478;
    if (!isIPv4(host) && !isIPv6(host)) throw new Error(`StunServer: host must be an IP address, got ${JSON.stringify(host)}`);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`StunServer: port must be 0-65535, got ${port}`);
    const socket = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', ipv6Only: isIPv6(host) && host !== '::' });
    socket.on('message', (msg: Buffer, rinfo: RemoteInfo) => this.onMessage(socket, msg, rinfo));
    socket.on('error', () => {
      // UDP send errors (e.g. ICMP unreachable) concern one client only; keep serving.
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, host, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    this.socket = socket;
    return this.address();
  }

  /** address is the bound address; it throws if the server is not listening. */
  address(): { address: string; port: number } {
    if (!this.socket) throw new Error('StunServer is not listening');
    const a = this.socket.address();
    return { address: a.address, port: a.port };
  }

  async close(): Promise<void> {
    const socket = this.socket;
    this.socket = undefined;
    if (socket) await new Promise<void>((resolve) => socket.close(() => resolve()));
  }

  private onMessage(socket: Socket, msg: Buffer, rinfo: RemoteInfo): void {
    const txid = parseBindingRequest(msg);
    if (!txid) {
      this.packetsIgnored++;
      return;
    }
    const address = rinfo.address.startsWith('::ffff:') && isIPv4(rinfo.address.slice(7)) ? rinfo.address.slice(7) : rinfo.address;
    this.requestsAnswered++;
    socket.send(buildBindingResponse(txid, address, rinfo.port), rinfo.port, rinfo.address);
  }
}

function ipBytes(address: string): Buffer {
  if (isIPv4(address)) return Buffer.from(address.split('.').map(Number));
  if (!isIPv6(address)) throw new Error(`not an IP address: ${address}`);
  const zoneless = address.split('%')[0]!;
  const [head, tail] = zoneless.includes('::') ? zoneless.split('::') : [zoneless, undefined];
  const parse = (part: string | undefined): number[] => {
    if (!part) return [];
    const out: number[] = [];
    for (const group of part.split(':')) {
      if (group.includes('.')) {
        const v4 = group.split('.').map(Number);
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else out.push(parseInt(group, 16));
    }
    return out;
  };
  const h = parse(head);
  const t = parse(tail);
  const groups = tail === undefined ? h : [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
  const b = Buffer.alloc(16);
  groups.forEach((g, i) => b.writeUInt16BE(g, i * 2));
  return b;
}

function formatIp(ip: Buffer): string {
  if (ip.length === 4) return Array.from(ip).join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(ip.readUInt16BE(i).toString(16));
  // Compress the longest run of zero groups, as the canonical IPv6 text form does.
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i > 1) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best === -1) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}
