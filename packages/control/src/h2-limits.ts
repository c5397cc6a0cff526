/**
 * The limits the control protocol's HTTP/2 server (h2.ts) puts on what a peer may make it do. A completed Noise
 * handshake costs an attacker nothing, so each limit holds against a peer that has no credentials at all. Every
 * breach ends the connection with GOAWAY and ENHANCE_YOUR_CALM (RFC 9113 §5.4.1), as nghttp2 and Go's server do.
 */

/** MAX_HEADER_FRAMES bounds the frames one header block comes in (HEADERS and its CONTINUATIONs): a client splits a block at the frame size, and empty frames carry nothing but cost. */
export const MAX_HEADER_FRAMES = 16;
/** MAX_HEADER_BLOCK bounds one header block's bytes with its CONTINUATION frames, before anything is decoded. */
export const MAX_HEADER_BLOCK = 64 * 1024;
/** MAX_HEADER_LIST_SIZE is announced (SETTINGS_MAX_HEADER_LIST_SIZE); a request over it is answered 431. */
export const MAX_HEADER_LIST_SIZE = 16_384;
/** MAX_DECODED_HEADER_LIST: HPACK's indexed fields let a small block decode to far more; decoding stops here. */
export const MAX_DECODED_HEADER_LIST = 64 * 1024;
/** MAX_QUEUED_REPLIES: PING and SETTINGS acknowledgements and RST_STREAMs queued while the peer has not read what came before; nghttp2 allows 1,000. */
export const MAX_QUEUED_REPLIES = 1_000;

/** BudgetSpec: `rate` tokens a second refill a budget holding at most `burst`. */
export interface BudgetSpec { readonly burst: number; readonly rate: number; readonly what: string }

/** RESETS: streams the peer resets or has refused (the rapid-reset pattern, CVE-2023-44487); nghttp2's defaults. */
export const RESETS: BudgetSpec = { burst: 1_000, rate: 33, what: 'stream resets' };
/** IDLE_FRAMES: frames that ask for no work (PING, SETTINGS, PRIORITY, empty DATA, unknown types); a real client sends a handful. */
export const IDLE_FRAMES: BudgetSpec = { burst: 1_000, rate: 100, what: 'control frames' };

/** FrameBudget is a token bucket for one connection: two numbers, so an idle session pays little for it. */
export class FrameBudget {
  private tokens: number;
  private at: number;

  constructor(readonly spec: BudgetSpec, private readonly now: () => number) {
    this.tokens = spec.burst;
    this.at = now();
  }

  /** take spends one token; false means the peer has sent more than the budget allows. */
  take(): boolean {
    const now = this.now();
    this.tokens = Math.min(this.spec.burst, this.tokens + ((now - this.at) / 1000) * this.spec.rate);
    this.at = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
