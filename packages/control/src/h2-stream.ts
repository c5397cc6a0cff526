import { COMPRESSION_ERROR, encodeResponseHeaders, ENHANCE_YOUR_CALM, ENTRY_OVERHEAD } from './hpack.js';
import { MAX_HEADER_LIST_SIZE } from './h2-limits.js';
import type { H2Session } from './h2.js';

/** The streams of the control protocol's HTTP/2 server (h2.ts): one request and its response each. */

/** H2_ERROR holds HTTP/2's error codes (RFC 9113 §7). */
export const H2_ERROR = {
  NO_ERROR: 0x0, PROTOCOL_ERROR: 0x1, INTERNAL_ERROR: 0x2, FLOW_CONTROL_ERROR: 0x3, STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6, REFUSED_STREAM: 0x7, CANCEL: 0x8, COMPRESSION_ERROR, ENHANCE_YOUR_CALM,
} as const;


/** pushPieces appends a payload given whole or in pieces to out, leaving out empty pieces. */
export function pushPieces(out: Uint8Array[], payload: Uint8Array | readonly Uint8Array[] | undefined): void {
  if (payload instanceof Uint8Array) { if (payload.length) out.push(payload); }
  else if (payload) for (const p of payload) if (p.length) out.push(p);
}

/** payloadLength is the byte length of a payload given whole or in pieces. */
export function payloadLength(payload: Uint8Array | readonly Uint8Array[] | undefined): number {
  if (!payload) return 0;
  if (payload instanceof Uint8Array) return payload.length;
  let n = 0;
  for (const p of payload) n += p.length;
  return n;
}
/** DEFAULT_WINDOW is HTTP/2's initial flow-control window; this server announces no other for receiving. */
export const DEFAULT_WINDOW = 65_535;

/**
 * H2Stream is one request and its response. The request's method and path are kept (the control protocol
 * needs nothing else of its headers); its body is read with body(). The response is sent with respond(),
 * write() and end(), or refused with reset().
 */
export class H2Stream {
  requestEnded = false;
  headersSent = false;
  /** ended: end() was called; endSent: END_STREAM has gone out. */
  ended = false;
  endSent = false;
  closed = false;
  overflowed = false;
  recvWindow = DEFAULT_WINDOW;
  /** contentLength is the request's content-length, if it gave one; bodyBytes counts the body's bytes as they come. */
  contentLength?: number;
  private bodyBytes = 0;
  queue?: Uint8Array[];
  endQueued = false;
  private chunks?: Buffer[];
  private size = 0;
  private waiter?: { resolve: (b: Buffer) => void; reject: (e: Error) => void };
  private onCloseFns?: Array<() => void>;
  private bodyTimer?: NodeJS.Timeout;

  constructor(private readonly session: H2Session, readonly id: number, readonly method: string, readonly path: string, public sendWindow: number) {}

  /** bodyWithin counts `bytes` more of the body and reports whether the body still agrees with its content-length. */
  bodyWithin(bytes: number, last: boolean): boolean {
    this.bodyBytes += bytes;
    return this.contentLength === undefined || (last ? this.bodyBytes === this.contentLength : this.bodyBytes <= this.contentLength);
  }

  /** bodyComplete: the body is as long as its content-length said (trailers end it). */
  bodyComplete(): boolean {
    return this.contentLength === undefined || this.bodyBytes === this.contentLength;
  }

  /** received keeps a piece of the request body (up to the session's bodyLimit) and returns the bytes it kept. */
  received(data: Buffer): number {
    if (this.overflowed || data.length === 0) return 0;
    const limit = this.session.opts.bodyLimit ?? 1024 * 1024;
    if (this.size + data.length > limit) {
      this.overflowed = true;
      this.dropBody();
      if (this.waiter) this.settle();
      return 0;
    }
    (this.chunks ??= []).push(data);
    this.size += data.length;
    return data.length;
  }

  /** requestEnd: the whole body is in. */
  requestEnd(): void {
    clearTimeout(this.bodyTimer);
    this.bodyTimer = undefined;
    if (this.waiter) this.settle();
  }

  /** body resolves with the request body once it has ended; refused with status 413 past the session's bodyLimit. */
  body(): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      if (this.overflowed || this.requestEnded || this.closed) this.settle();
    });
  }

  private settle(): void {
    const w = this.waiter!;
    this.waiter = undefined;
    if (this.overflowed) { w.reject(Object.assign(new Error('body too large'), { status: 413 })); return; }
    if (!this.requestEnded) { w.reject(new Error('the stream closed before its request body ended')); return; }
    const chunks = this.dropBody();
    w.resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
  }

  /** dropBody lets go of the body pieces held, telling the session, and returns them. */
  private dropBody(): Buffer[] {
    const chunks = this.chunks ?? [];
    const held = this.size;
    this.chunks = undefined;
    this.size = 0;
    if (held) this.session.released(held);
    return chunks;
  }

  armBodyTimeout(ms: number): void {
    this.bodyTimer = setTimeout(() => { if (!this.requestEnded) this.reset(H2_ERROR.CANCEL); }, ms);
    this.bodyTimer.unref();
  }

  /** onClose calls fn once the stream has closed (at once if it has). */
  onClose(fn: () => void): void {
    if (this.closed) { fn(); return; }
    (this.onCloseFns ??= []).push(fn);
  }

  /** respond sends the response headers, once. */
  respond(status: number, contentType?: string): void {
    if (this.headersSent || this.closed) return;
    this.headersSent = true;
    this.session.sendHeaders(this, encodeResponseHeaders(status, contentType), false);
  }

  /**
   * write sends response bytes (a 200 first if nothing was sent), queued while flow control holds them back: one
   * buffer, or a message's pieces in order (see frames.ts), which go out in DATA frames without being joined.
   */
  write(data: Uint8Array | readonly Uint8Array[]): void {
    if (this.closed || this.ended || payloadLength(data) === 0) return;
    this.respond(200);
    const q = (this.queue ??= []);
    const idle = q.length === 0;
    pushPieces(q, data);
    if (idle) this.session.pump(this);
  }

  /** end sends the last bytes, if any (one buffer or a message's pieces), and ends the response (a 200 with no body if nothing was sent). */
  end(data?: string | Uint8Array | readonly Uint8Array[]): void {
    if (this.closed || this.ended) return;
    this.ended = true;
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    if (!this.headersSent && !payloadLength(bytes)) {
      this.headersSent = true;
      this.session.sendHeaders(this, encodeResponseHeaders(200), true);
      return;
    }
    this.respond(200);
    this.endQueued = true;
    const q = (this.queue ??= []);
    const idle = q.length === 0;
    pushPieces(q, bytes);
    if (idle || q.length <= 1) this.session.pump(this);
  }

  /** reply answers with a status and a line of text. */
  reply(status: number, text: string): void {
    this.respond(status, 'text/plain; charset=utf-8');
    this.end(text + '\n');
  }

  /** reset ends the stream with RST_STREAM and an error code. */
  reset(code: number): void {
    if (this.closed) return;
    this.session.resetStream(this.id, code);
  }

  closedNow(): void {
    this.closed = true;
    clearTimeout(this.bodyTimer);
    this.bodyTimer = undefined;
    this.queue = undefined;
    if (this.waiter) this.settle();
    this.dropBody();
    const fns = this.onCloseFns;
    this.onCloseFns = undefined;
    if (fns) for (const fn of fns) fn();
  }
}

/** RequestHeaders checks a request's header fields as they are decoded, keeping the pseudo-headers it needs. */
export class RequestHeaders {
  method = '';
  path = '';
  scheme = '';
  size = 0;
  contentLength?: number;
  private regularSeen = false;
  private bad?: string;

  add(name: string, value: string): void {
    this.size += name.length + value.length + ENTRY_OVERHEAD; // SETTINGS_MAX_HEADER_LIST_SIZE counts as HPACK does
    // Past the limit the request is answered 431 whatever its fields say: they are counted, not looked at.
    if (this.bad || this.size > MAX_HEADER_LIST_SIZE) return;
    if (name.startsWith(':')) {
      if (this.regularSeen) { this.bad = `pseudo-header ${name} after a regular header`; return; }
      if (name === ':method' && !this.method) this.method = value;
      else if (name === ':path' && !this.path) this.path = value;
      else if (name === ':scheme' && !this.scheme) this.scheme = value;
      else if (name !== ':authority') this.bad = `pseudo-header ${name} unknown or repeated`;
      return;
    }
    this.regularSeen = true;
    if (/[A-Z]/.test(name)) this.bad = `header name ${name} has upper-case letters`;
    else if (name === 'connection' || name === 'keep-alive' || name === 'proxy-connection' || name === 'transfer-encoding' || name === 'upgrade') this.bad = `connection-specific header ${name}`;
    else if (name === 'te' && value !== 'trailers') this.bad = 'te other than trailers';
    else if (name === 'content-length') {
      if (!/^\d{1,15}$/.test(value) || (this.contentLength !== undefined && this.contentLength !== Number(value))) this.bad = 'a content-length that is not one number';
      else this.contentLength = Number(value);
    }
  }

  problem(): string | undefined {
    if (this.bad) return this.bad;
    if (!this.method || !this.path || !this.scheme) return 'a request without :method, :path or :scheme';
    return undefined;
  }
}
