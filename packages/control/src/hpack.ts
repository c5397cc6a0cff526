/**
 * HPACK (RFC 7541) for the control protocol's HTTP/2 server: a complete decoder (a client may use the dynamic
 * table, Huffman-coded strings and table size updates as it likes) and the few encodings the server's
 * responses need (a status and a content type, never indexed, so the server keeps no encoder table).
 *
 * Written here rather than taken from npm: the one JavaScript HPACK package in wide use (hpack.js) has not
 * been maintained since 2016 and decodes through streams, while this decoder is a page of code and is
 * checked against the two encoders that matter (nghttp2 in Node's HTTP/2 client, and Go's in Tailscale's).
 */

/** H2Error is a protocol error with its HTTP/2 error code (RFC 9113 §7). */
export class H2Error extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

/** COMPRESSION_ERROR is HTTP/2's error code for a header block that cannot be decoded. */
export const COMPRESSION_ERROR = 0x9;
/** ENHANCE_YOUR_CALM is HTTP/2's error code for a peer that makes this side do too much. */
export const ENHANCE_YOUR_CALM = 0xb;

/** The static table (RFC 7541 Appendix A), index 1 first. */
const STATIC: ReadonlyArray<readonly [string, string]> = [
  [':authority', ''], [':method', 'GET'], [':method', 'POST'], [':path', '/'], [':path', '/index.html'],
  [':scheme', 'http'], [':scheme', 'https'], [':status', '200'], [':status', '204'], [':status', '206'],
  [':status', '304'], [':status', '400'], [':status', '404'], [':status', '500'], ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'], ['accept-language', ''], ['accept-ranges', ''], ['accept', ''],
  ['access-control-allow-origin', ''], ['age', ''], ['allow', ''], ['authorization', ''], ['cache-control', ''],
  ['content-disposition', ''], ['content-encoding', ''], ['content-language', ''], ['content-length', ''],
  ['content-location', ''], ['content-range', ''], ['content-type', ''], ['cookie', ''], ['date', ''], ['etag', ''],
  ['expect', ''], ['expires', ''], ['from', ''], ['host', ''], ['if-match', ''], ['if-modified-since', ''],
  ['if-none-match', ''], ['if-range', ''], ['if-unmodified-since', ''], ['last-modified', ''], ['link', ''],
  ['location', ''], ['max-forwards', ''], ['proxy-authenticate', ''], ['proxy-authorization', ''], ['range', ''],
  ['referer', ''], ['refresh', ''], ['retry-after', ''], ['server', ''], ['set-cookie', ''],
  ['strict-transport-security', ''], ['transfer-encoding', ''], ['user-agent', ''], ['vary', ''], ['via', ''],
  ['www-authenticate', ''],
];

/** STATUS_200_INDEX (`:status: 200`, also the name for other statuses) and CONTENT_TYPE_INDEX: the static entries responses use. */
const STATUS_200_INDEX = 8;
const CONTENT_TYPE_INDEX = 31;

/**
 * The Huffman code's lengths in bits for symbols 0–255 and EOS (256), one letter each: 'A' is 5 bits, 'Z' 30
 * (RFC 7541 Appendix B). The code is canonical: codes of one length are consecutive in symbol order, and the
 * first code of each length follows the last of the length before, shifted. So the lengths define it.
 */
const HUFFMAN_LENGTHS =
  'ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCCDCDIOIJBKABABABBBACCBBBA' +
  'BCBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQQRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWWPTPQ' +
  'RQQSRRUUTTVSVWVVWWWWWXWWWWWVZ';
const EOS = 256;
const MAX_CODE_LENGTH = 30;

/** Canonical decoding tables: per length, the first code, how many codes, and where their symbols start. */
const firstCode = new Int32Array(MAX_CODE_LENGTH + 2);
const codeCount = new Int32Array(MAX_CODE_LENGTH + 2);
const symbolStart = new Int32Array(MAX_CODE_LENGTH + 2);
const symbolsByCode = new Uint16Array(257);
(() => {
  const lengths = Array.from(HUFFMAN_LENGTHS, (c) => c.charCodeAt(0) - 65 + 5);
  if (lengths.length !== 257) throw new Error('HPACK Huffman table: 257 lengths expected');
  const order = lengths.map((_, s) => s).sort((a, b) => lengths[a]! - lengths[b]! || a - b);
  order.forEach((s, i) => { symbolsByCode[i] = s; codeCount[lengths[s]!]!++; });
  let code = 0;
  let at = 0;
  for (let len = 1; len <= MAX_CODE_LENGTH; len++) {
    firstCode[len] = code;
    symbolStart[len] = at;
    code = (code + codeCount[len]!) << 1;
    at += codeCount[len]!;
  }
})();

/** decodeHuffman decodes a Huffman-coded string; padding must be at most 7 bits, all ones (RFC 7541 §5.2). */
export function decodeHuffman(buf: Uint8Array, start: number, end: number): string {
  // The shortest code is 5 bits, so n bytes decode to at most 8n/5 symbols.
  const out = Buffer.allocUnsafe(Math.ceil(((end - start) * 8) / 5));
  let n = 0;
  let code = 0;
  let len = 0;
  for (let i = start; i < end; i++) {
    const byte = buf[i]!;
    for (let bit = 7; bit >= 0; bit--) {
      code = (code << 1) | ((byte >> bit) & 1);
      len++;
      const offset = code - firstCode[len]!;
      if (offset >= 0 && offset < codeCount[len]!) {
        const symbol = symbolsByCode[symbolStart[len]! + offset]!;
        if (symbol === EOS) throw new H2Error(COMPRESSION_ERROR, 'Huffman-coded string holds the EOS symbol');
        out[n++] = symbol;
        code = 0;
        len = 0;
      } else if (len >= MAX_CODE_LENGTH) {
        throw new H2Error(COMPRESSION_ERROR, 'invalid Huffman code');
      }
    }
  }
  if (len > 7) throw new H2Error(COMPRESSION_ERROR, 'Huffman padding longer than 7 bits');
  if (code !== (1 << len) - 1) throw new H2Error(COMPRESSION_ERROR, 'Huffman padding is not the EOS prefix');
  return out.toString('latin1', 0, n);
}

/** ENTRY_OVERHEAD is what RFC 7541 §4.1 adds to each dynamic table entry's name and value lengths. */
export const ENTRY_OVERHEAD = 32;

/**
 * HpackDecoder decodes header blocks of one connection in order, keeping its dynamic table. Names and values
 * are latin1 strings, one character per octet, as they were on the wire. Any malformed block throws an H2Error
 * with COMPRESSION_ERROR: the table is then out of step with the peer's, and the connection must end.
 */
export class HpackDecoder {
  /** table holds the dynamic entries, newest last (index 62 is the last element). */
  private table: Array<readonly [string, string]> = [];
  private size = 0;
  private maxSize: number;

  /** limit is SETTINGS_HEADER_TABLE_SIZE as this side announced it (the default 4,096 when not announced). */
  constructor(private readonly limit = 4096) {
    this.maxSize = limit;
  }

  /**
   * decode calls onField for each field of a complete header block. The fields' sizes (as SETTINGS_MAX_HEADER_LIST_SIZE
   * counts them) are added up as they are decoded, and past maxListSize decoding stops with ENHANCE_YOUR_CALM: an
   * indexed field is one byte on the wire however long the entry it names, so a 64 KiB block could otherwise stand
   * for gigabytes of fields.
   */
  decode(block: Uint8Array, onField: (name: string, value: string) => void, maxListSize = Infinity): void {
    let at = 0;
    let fields = 0;
    let listSize = 0;
    const emit = (name: string, value: string): void => {
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize > maxListSize) throw new H2Error(ENHANCE_YOUR_CALM, `a header block that decodes to over ${maxListSize} bytes of fields`);
      onField(name, value);
      fields++;
    };
    const integer = (prefixBits: number): number => {
      const mask = (1 << prefixBits) - 1;
      let value = block[at++]! & mask;
      if (value < mask) return value;
      let shift = 0;
      for (;;) {
        if (at >= block.length) throw new H2Error(COMPRESSION_ERROR, 'header block ends inside an integer');
        const b = block[at++]!;
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if (value > 0x7fffffff) throw new H2Error(COMPRESSION_ERROR, 'integer too large in header block');
        if ((b & 0x80) === 0) return value;
      }
    };
    const string = (): string => {
      if (at >= block.length) throw new H2Error(COMPRESSION_ERROR, 'header block ends before a string');
      const huffman = (block[at]! & 0x80) !== 0;
      const length = integer(7);
      if (at + length > block.length) throw new H2Error(COMPRESSION_ERROR, 'string runs past the end of the header block');
      const s = huffman ? decodeHuffman(block, at, at + length) : Buffer.from(block.buffer, block.byteOffset + at, length).toString('latin1');
      at += length;
      return s;
    };
    while (at < block.length) {
      const b = block[at]!;
      if (b & 0x80) {
        const [name, value] = this.entry(integer(7));
        emit(name, value);
      } else if (b & 0x40) {
        const index = integer(6);
        const name = index === 0 ? string() : this.entry(index)[0];
        const value = string();
        this.insert(name, value);
        emit(name, value);
      } else if (b & 0x20) {
        if (fields > 0) throw new H2Error(COMPRESSION_ERROR, 'dynamic table size update after a header field');
        const size = integer(5);
        if (size > this.limit) throw new H2Error(COMPRESSION_ERROR, `dynamic table size update to ${size} exceeds the ${this.limit} allowed`);
        this.maxSize = size;
        this.evict();
      } else {
        // 0000xxxx without indexing, 0001xxxx never indexed: the same to a decoder.
        const index = integer(4);
        const name = index === 0 ? string() : this.entry(index)[0];
        emit(name, string());
      }
    }
  }

  private entry(index: number): readonly [string, string] {
    if (index === 0) throw new H2Error(COMPRESSION_ERROR, 'header index 0');
    if (index <= STATIC.length) return STATIC[index - 1]!;
    const e = this.table[this.table.length - 1 - (index - STATIC.length - 1)];
    if (!e) throw new H2Error(COMPRESSION_ERROR, `header index ${index} is past the dynamic table (${this.table.length} entries)`);
    return e;
  }

  private insert(name: string, value: string): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    if (size > this.maxSize) {
      this.table = [];
      this.size = 0;
      return;
    }
    this.table.push([name, value]);
    this.size += size;
    this.evict();
  }

  private evict(): void {
    let drop = 0;
    while (this.size > this.maxSize) {
      const [name, value] = this.table[drop++]!;
      this.size -= name.length + value.length + ENTRY_OVERHEAD;
    }
    if (drop) this.table.splice(0, drop);
  }
}

/** encodeInteger appends an HPACK integer with a prefix of prefixBits bits, the first byte's high bits set to flags. */
function encodeInteger(out: number[], flags: number, prefixBits: number, value: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) { out.push(flags | value); return; }
  out.push(flags | max);
  value -= max;
  while (value >= 0x80) { out.push((value & 0x7f) | 0x80); value = Math.floor(value / 0x80); }
  out.push(value);
}

/** encodeLiteral appends a literal field without indexing, its name a static index, its value raw (not Huffman). */
function encodeLiteral(out: number[], nameIndex: number, value: string): void {
  encodeInteger(out, 0x00, 4, nameIndex);
  const bytes = Buffer.from(value, 'latin1');
  encodeInteger(out, 0x00, 7, bytes.length);
  for (const b of bytes) out.push(b);
}

/** The header blocks of the responses the server sends most, encoded once. */
const responseBlocks = new Map<string, Buffer>();

/** encodeResponseHeaders encodes `:status` and an optional content-type (a string of ASCII) as a header block. */
export function encodeResponseHeaders(status: number, contentType?: string): Buffer {
  const key = `${status} ${contentType ?? ''}`;
  const cached = responseBlocks.get(key);
  if (cached) return cached;
  const out: number[] = [];
  if (status === 200) out.push(0x80 | STATUS_200_INDEX);
  else encodeLiteral(out, STATUS_200_INDEX, String(status));
  if (contentType) encodeLiteral(out, CONTENT_TYPE_INDEX, contentType);
  const block = Buffer.from(out);
  if (responseBlocks.size < 64) responseBlocks.set(key, block);
  return block;
}
