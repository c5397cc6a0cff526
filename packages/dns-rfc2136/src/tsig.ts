import { createHmac, timingSafeEqual } from 'node:crypto';

/*
 * TSIG (RFC 8945): a DNS message signed with a shared HMAC key. Written here because
 * no maintained npm library signs DNS messages with TSIG: dns-packet (used for the
 * message itself) encodes the TSIG record only as opaque bytes, and the MAC covers
 * the message's own wire bytes plus fields that never appear on the wire in that
 * order, so it has to be computed next to the encoder. Only the HMAC-SHA2 family is
 * offered (hmac-md5 and hmac-sha1 are deprecated for new keys, RFC 8945 §6).
 */

/** TSIG_ALGORITHMS maps a key's algorithm name to Node's digest. */
export const TSIG_ALGORITHMS = { 'hmac-sha256': 'sha256', 'hmac-sha384': 'sha384', 'hmac-sha512': 'sha512', 'hmac-sha224': 'sha224' } as const;
export type TsigAlgorithm = keyof typeof TSIG_ALGORITHMS;

export interface TsigKey { name: string; algorithm: TsigAlgorithm; secret: Buffer }

/** FUDGE: seconds of clock difference the server may allow between our time and its own (RFC 8945 recommends 300). */
const FUDGE = 300;
const TYPE_TSIG = 250;
const CLASS_ANY = 255;

/** TSIG_ERRORS are the TSIG error codes a server may answer with (RFC 8945 §5.2). */
export const TSIG_ERRORS: Record<number, string> = {
  16: 'BADSIG: the server computed another signature (the key secret or algorithm differs from the server\'s)',
  17: 'BADKEY: the server has no key of this name and algorithm',
  18: 'BADTIME: the clocks of this machine and the DNS server differ by more than the allowed fudge',
  22: 'BADTRUNC: the server refused a truncated signature',
};

/** wireName is a domain name in uncompressed, lower-case wire form (the canonical form the MAC covers). */
export function wireName(name: string): Buffer {
  const labels = name.replace(/\.$/, '').toLowerCase().split('.').filter(Boolean);
  const parts: Buffer[] = [];
  for (const label of labels) {
    const b = Buffer.from(label, 'ascii');
    if (b.length > 63) throw new Error(`DNS label longer than 63 bytes in ${JSON.stringify(name)}`);
    parts.push(Buffer.from([b.length]), b);
  }
  parts.push(Buffer.from([0]));
  return Buffer.concat(parts);
}

function u16(n: number): Buffer { const b = Buffer.alloc(2); b.writeUInt16BE(n); return b; }
function u48(n: number): Buffer { const b = Buffer.alloc(6); b.writeUIntBE(n, 0, 6); return b; }

/** variables are the TSIG fields the MAC covers after the message (RFC 8945 §4.3.3). */
function variables(key: TsigKey, timeSigned: number, fudge: number, error: number, other: Buffer): Buffer {
  return Buffer.concat([wireName(key.name), u16(CLASS_ANY), Buffer.alloc(4), wireName(key.algorithm), u48(timeSigned), u16(fudge), u16(error), u16(other.length), other]);
}

function hmac(key: TsigKey, ...parts: Buffer[]): Buffer {
  const h = createHmac(TSIG_ALGORITHMS[key.algorithm], key.secret);
  for (const p of parts) h.update(p);
  return h.digest();
}

/**
 * sign appends a TSIG record to an encoded message (whose additional section does not
 * yet count it) and returns the signed message and its MAC (needed to check the reply).
 */
export function sign(message: Buffer, key: TsigKey, nowSeconds: number): { signed: Buffer; mac: Buffer } {
  const mac = hmac(key, message, variables(key, nowSeconds, FUDGE, 0, Buffer.alloc(0)));
  const rdata = Buffer.concat([wireName(key.algorithm), u48(nowSeconds), u16(FUDGE), u16(mac.length), mac, message.subarray(0, 2), u16(0), u16(0)]);
  const rr = Buffer.concat([wireName(key.name), u16(TYPE_TSIG), u16(CLASS_ANY), Buffer.alloc(4), u16(rdata.length), rdata]);
  const signed = Buffer.concat([message, rr]);
  signed.writeUInt16BE(message.readUInt16BE(10) + 1, 10);
  return { signed, mac };
}

/** Tsig is the TSIG record found at the end of a reply. */
export interface ReplyTsig { error: number; mac: Buffer; timeSigned: number; fudge: number; other: Buffer; algorithm: string; keyName: string; unsigned: Buffer }

/** skipName returns the offset after a (possibly compressed) name. */
function skipName(buf: Buffer, offset: number): number {
  for (;;) {
    const len = buf[offset];
    if (len === undefined) throw new Error('reply ends inside a name');
    if (len === 0) return offset + 1;
    if ((len & 0xc0) === 0xc0) return offset + 2;
    offset += len + 1;
  }
}

/** readName reads an uncompressed name (a TSIG record's names are never compressed). */
function readName(buf: Buffer, offset: number): { name: string; end: number } {
  const labels: string[] = [];
  for (;;) {
    const len = buf[offset];
    if (len === undefined || (len & 0xc0)) throw new Error('TSIG record holds a compressed or truncated name');
    offset++;
    if (len === 0) return { name: labels.join('.').toLowerCase(), end: offset };
    labels.push(buf.toString('ascii', offset, offset + len));
    offset += len;
  }
}

/** findTsig returns the reply's TSIG record (the last additional record) with the reply as it was before signing, or undefined. */
export function findTsig(reply: Buffer): ReplyTsig | undefined {
  const counts = [4, 6, 8, 10].map((o) => reply.readUInt16BE(o));
  if (counts[3] === 0) return undefined;
  let offset = 12;
  for (let i = 0; i < counts[0]!; i++) offset = skipName(reply, offset) + 4;
  const records = counts[1]! + counts[2]! + counts[3]!;
  for (let i = 0; i < records - 1; i++) {
    offset = skipName(reply, offset) + 8;
    offset += reply.readUInt16BE(offset) + 2;
  }
  const start = offset;
  const owner = readName(reply, offset);
  offset = owner.end;
  if (reply.readUInt16BE(offset) !== TYPE_TSIG) return undefined;
  offset += 10;
  const alg = readName(reply, offset);
  offset = alg.end;
  const timeSigned = reply.readUIntBE(offset, 6);
  const fudge = reply.readUInt16BE(offset + 6);
  const macLen = reply.readUInt16BE(offset + 8);
  const mac = reply.subarray(offset + 10, offset + 10 + macLen);
  offset += 10 + macLen + 2; // original id
  const error = reply.readUInt16BE(offset);
  const otherLen = reply.readUInt16BE(offset + 2);
  const other = reply.subarray(offset + 4, offset + 4 + otherLen);
  const unsigned = Buffer.from(reply.subarray(0, start));
  unsigned.writeUInt16BE(counts[3]! - 1, 10);
  return { error, mac, timeSigned, fudge, other, algorithm: alg.name, keyName: owner.name, unsigned };
}

/** verifyReply checks a reply's MAC, computed over the request's MAC and the reply (RFC 8945 §5.3). */
export function verifyReply(tsig: ReplyTsig, key: TsigKey, requestMac: Buffer): boolean {
  if (tsig.keyName !== key.name.replace(/\.$/, '').toLowerCase() || tsig.algorithm !== key.algorithm) return false;
  const expected = hmac(key, u16(requestMac.length), requestMac, tsig.unsigned, variables(key, tsig.timeSigned, tsig.fudge, tsig.error, tsig.other));
  return expected.length === tsig.mac.length && timingSafeEqual(expected, tsig.mac);
}
