import { EventEmitter } from 'node:events';
import { connect as http2Connect, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { dialTs2021, fetchControlKey, formatKey, generateKeyPair, type KeyPair } from '@headway/noise';
import { applyMapResponse, emptyNetMap, isKeepAlive, type NetMap } from './netmap.js';
import { MapFrameDecoder } from './zstd.js';
import {
  LOGOUT_EXPIRY,
  ZERO_TIME,
  type Hostinfo,
  type MapRequest,
  type MapResponse,
  type Node,
  type NodeID,
  type PingRequest,
  type RegisterRequest,
  type RegisterResponse,
} from './wire.js';

/** TestDeviceOptions describe one virtual tailscaled. */
export interface TestDeviceOptions {
  serverUrl: string;
  hostname: string;
  capabilityVersion?: number;
  os?: string;
  /** machineKey may be supplied to simulate a device restarting with its stored identity. */
  machineKey?: KeyPair;
  nodeKey?: KeyPair;
  /**
   * keep is what the device keeps of each MapResponse it applies (all of it by default). It sees every message,
   * keep-alives included, before it is applied (the benchmark's workers feed a second, compact netmap from it).
   */
  keep?: (msg: MapResponse) => MapResponse;
  /** peers makes the peer map of each map session's netmap (a plain Map by default; see bench-compact.ts in @headway/bench). */
  peers?: () => Map<NodeID, Node>;
  discoKey?: KeyPair;
}

/** RegisterOptions map onto RegisterRequest fields (see control-protocol §5.1). */
export interface RegisterOptions {
  authKey?: string;
  followup?: string;
  /** expiry: a Date or RFC 3339 string; omitted = Go zero time (no change requested). */
  expiry?: Date | string;
  ephemeral?: boolean;
  tags?: string[];
  routes?: string[];
  /** oldNodeKey overrides the previous node key sent (defaults to the one replaced by rotateNodeKey, else zero). */
  oldNodeKey?: string;
  /** logout sends the past expiry `tailscale logout` uses. */
  logout?: boolean;
  hostinfo?: Partial<Hostinfo>;
  signal?: AbortSignal;
}

/** StartMapOptions configure the long poll; hostinfo merges over the device's default Hostinfo. */
export interface StartMapOptions {
  stream?: boolean;
  omitPeers?: boolean;
  endpoints?: string[];
  hostinfo?: Partial<Hostinfo>;
}

/** LiteUpdateOptions are the fields a non-streaming OmitPeers request reports. */
export interface LiteUpdateOptions {
  endpoints?: string[];
  hostinfo?: Partial<Hostinfo>;
  discoKey?: KeyPair;
}

/** HttpReply is a buffered HTTP/2 response from the control server. */
export interface HttpReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** ControlHttpError carries a non-200 control reply, phrased like tailscaled's own error. */
export class ControlHttpError extends Error {
  constructor(readonly what: string, readonly status: number, readonly body: string) {
    super(`${what}: http ${status}: ${body}`);
    this.name = 'ControlHttpError';
  }
}

const ZERO_NODE_KEY = 'nodekey:' + '0'.repeat(64);

/** settledFirst replaces startMap's resolvers once its first message is in (see there). */
const settledFirst = (): void => undefined;

/**
 * TestDevice is a virtual tailscaled speaking the real control protocol: /key, the ts2021 Noise upgrade,
 * HTTP/2 inside it, register and a streamed map poll whose deltas build `netmap` the way the real client does.
 * Events: 'update' (MapResponse, after it was applied), 'keepalive', 'mapEnd' (Error | undefined), 'ping' (the
 * status of a PingRequest answer, or its Error).
 */
export class TestDevice extends EventEmitter {
  readonly serverUrl: string;
  readonly hostname: string;
  readonly capabilityVersion: number;
  readonly os: string;
  readonly machineKey: KeyPair;
  nodeKey: KeyPair;
  discoKey: KeyPair;
  readonly keep: ((msg: MapResponse) => MapResponse) | undefined;
  private readonly makePeers: (() => Map<NodeID, Node>) | undefined;
  /** previousNodeKey is the key replaced by the last rotateNodeKey, sent as OldNodeKey until a register succeeds. */
  previousNodeKey: KeyPair | undefined;
  controlPublicKey: Buffer | undefined;
  earlyPayload: object | undefined;
  netmap: NetMap;
  /** mapDone settles when the current map stream ends (rejects on a stream or decode error). */
  mapDone: Promise<void> = Promise.resolve();
  /** mapBytes counts map-stream bytes received (compressed frames as sent), so the benchmark can report bytes per session. */
  mapBytes = 0;

  /**
   * answerPings: answer a map message's PingRequest as tailscaled does (HTTP HEAD to its URL with the plain HTTP
   * client, once per URL). Set it false to play a device that stays connected but stops answering.
   */
  answerPings = true;
  /** pingAnswers are the statuses of the PingRequest answers sent, in order. */
  readonly pingAnswers: number[] = [];
  private lastPingUrl = '';

  private session: ClientHttp2Session | undefined;
  private mapStream: ClientHttp2Stream | undefined;
  private lastHostinfo: Partial<Hostinfo> = {};
  private lastEndpoints: string[] = [];

  constructor(opts: TestDeviceOptions) {
    super();
    if (!opts.serverUrl) throw new Error('TestDevice needs serverUrl (e.g. http://127.0.0.1:8080)');
    if (!opts.hostname) throw new Error('TestDevice needs a hostname');
    this.serverUrl = opts.serverUrl;
    this.hostname = opts.hostname;
    this.capabilityVersion = opts.capabilityVersion ?? 130;
    this.os = opts.os ?? 'linux';
    this.machineKey = opts.machineKey ?? generateKeyPair();
    this.nodeKey = opts.nodeKey ?? generateKeyPair();
    this.discoKey = opts.discoKey ?? generateKeyPair();
    this.keep = opts.keep;
    this.makePeers = opts.peers;
    this.netmap = emptyNetMap(this.makePeers?.());
  }

  get machineKeyText(): string {
    return formatKey('mkey', this.machineKey.publicKey);
  }

  get nodeKeyText(): string {
    return formatKey('nodekey', this.nodeKey.publicKey);
  }

  get discoKeyText(): string {
    return formatKey('discokey', this.discoKey.publicKey);
  }

  /** connect fetches the control key, dials ts2021 and opens the single HTTP/2 session all requests share. */
  async connect(): Promise<void> {
    if (this.session && !this.session.destroyed) return;
    this.controlPublicKey = await fetchControlKey(this.serverUrl, this.capabilityVersion);
    const { conn, earlyPayload } = await dialTs2021({
      url: this.serverUrl,
      machinePrivateKey: this.machineKey.privateKey,
      controlPublicKey: this.controlPublicKey,
      capabilityVersion: this.capabilityVersion,
    });
    this.earlyPayload = earlyPayload;
    const host = new URL(this.serverUrl).host;
    const session = http2Connect(`http://${host}`, { createConnection: () => conn });
    // Session errors surface through the pending requests; keep them from crashing the process.
    session.on('error', () => undefined);
    this.session = session;
  }

  private requireSession(): ClientHttp2Session {
    if (!this.session || this.session.destroyed) throw new Error(`${this.hostname}: not connected; call connect() first`);
    return this.session;
  }

  private defaultHostinfo(extra: Partial<Hostinfo> = {}): Hostinfo {
    return {
      IPNVersion: '1.90.0-headway-testkit',
      OS: this.os,
      Hostname: this.hostname,
      GoArch: 'amd64',
      ...this.lastHostinfo,
      ...extra,
    };
  }

  /** openRequest sends `body` as JSON; a string or bytes go out as they are (for malformed-body tests). */
  private openRequest(path: string, body: object | string, extraHeaders: Record<string, string> = {}): ClientHttp2Stream {
    const stream = this.requireSession().request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/json',
      'ts-lb': this.nodeKeyText,
      ...extraHeaders,
    });
    stream.end(typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body));
    return stream;
  }

  /** request POSTs JSON on the Noise HTTP/2 session and buffers the reply. */
  async request(path: string, body: object | string, signal?: AbortSignal): Promise<HttpReply> {
    const stream = this.openRequest(path, body);
    const onAbort = (): void => {
      stream.close();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<HttpReply>((resolve, reject) => {
        let status = 0;
        let headers: HttpReply['headers'] = {};
        const chunks: Buffer[] = [];
        stream.on('response', (h) => {
          status = Number(h[':status']);
          headers = h as HttpReply['headers'];
        });
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => resolve({ status, headers, body: Buffer.concat(chunks) }));
        stream.on('error', (err) => reject(new Error(`POST ${path}: ${err.message}`)));
        stream.on('close', () => {
          if (status === 0) reject(new Error(`POST ${path}: stream closed without a response${signal?.aborted ? ' (aborted)' : ''}`));
        });
      });
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** buildRegisterRequest produces the RegisterRequest JSON tailscaled would send for these options. */
  buildRegisterRequest(opts: RegisterOptions = {}): RegisterRequest {
    let expiry = ZERO_TIME;
    if (opts.logout) expiry = LOGOUT_EXPIRY;
    else if (opts.expiry !== undefined) expiry = opts.expiry instanceof Date ? opts.expiry.toISOString() : opts.expiry;
    const hostinfo = this.defaultHostinfo(opts.hostinfo);
    if (opts.tags) hostinfo.RequestTags = opts.tags;
    if (opts.routes) hostinfo.RoutableIPs = opts.routes;
    return {
      Version: this.capabilityVersion,
      NodeKey: this.nodeKeyText,
      OldNodeKey: opts.oldNodeKey ?? (this.previousNodeKey ? formatKey('nodekey', this.previousNodeKey.publicKey) : ZERO_NODE_KEY),
      Auth: opts.authKey ? { AuthKey: opts.authKey } : null,
      Expiry: expiry,
      Followup: opts.followup ?? '',
      Hostinfo: hostinfo,
      Ephemeral: opts.ephemeral ?? false,
      NodeKeySignature: null,
      Timestamp: new Date().toISOString(),
      Tailnet: '',
    };
  }

  /** register sends POST /machine/register; a non-200 reply throws ControlHttpError, `Error` in the body does not. */
  async register(opts: RegisterOptions = {}): Promise<RegisterResponse> {
    const body = this.buildRegisterRequest(opts);
    const reply = await this.request('/machine/register', body, opts.signal);
    if (reply.status !== 200) throw new ControlHttpError('register request', reply.status, reply.body.toString('utf8').trim());
    let parsed: RegisterResponse;
    try {
      parsed = JSON.parse(reply.body.toString('utf8')) as RegisterResponse;
    } catch {
      throw new Error(`register response is not JSON: ${JSON.stringify(reply.body.toString('utf8').slice(0, 200))}`);
    }
    if (!parsed.Error && !parsed.AuthURL && !parsed.NodeKeyExpired) this.previousNodeKey = undefined;
    // tailscaled keeps one Hostinfo and repeats it (routes, tags included) on every later request.
    this.lastHostinfo = {
      ...this.lastHostinfo, ...(opts.hostinfo ?? {}),
      ...(opts.routes ? { RoutableIPs: opts.routes } : {}), ...(opts.tags ? { RequestTags: opts.tags } : {}),
    };
    return parsed;
  }

  private buildMapRequest(stream: boolean, omitPeers: boolean, endpoints: string[] | undefined, hostinfo: Partial<Hostinfo> | undefined): MapRequest {
    if (endpoints) this.lastEndpoints = endpoints;
    if (hostinfo) this.lastHostinfo = { ...this.lastHostinfo, ...hostinfo };
    return {
      Version: this.capabilityVersion,
      Compress: 'zstd',
      KeepAlive: true,
      NodeKey: this.nodeKeyText,
      DiscoKey: this.discoKeyText,
      Stream: stream,
      OmitPeers: omitPeers,
      Hostinfo: this.defaultHostinfo(),
      Endpoints: this.lastEndpoints,
      EndpointTypes: this.lastEndpoints.map(() => 1),
    };
  }

  /**
   * startMap opens POST /machine/map and resolves with the first MapResponse once it has been applied
   * (the self node must be there, or the real client would abort). Later messages keep updating `netmap`.
   */
  async startMap(opts: StartMapOptions = {}): Promise<MapResponse> {
    this.stopMap();
    this.netmap = emptyNetMap(this.makePeers?.());
    const stream = opts.stream ?? true;
    const body = this.buildMapRequest(stream, opts.omitPeers ?? false, opts.endpoints, opts.hostinfo);
    const req = this.openRequest('/machine/map', body);
    this.mapStream = req;
    const decoder = new MapFrameDecoder();
    let resolveFirst!: (msg: MapResponse) => void;
    let rejectFirst!: (err: Error) => void;
    const first = new Promise<MapResponse>((resolve, reject) => {
      resolveFirst = resolve;
      rejectFirst = reject;
    });
    let sawFirst = false;
    this.mapDone = new Promise<void>((resolve, reject) => {
      let status = 0;
      let errorBody = '';
      let settled = false;
      const fail = (err: Error): void => {
        if (settled) return;
        settled = true;
        req.close();
        if (!sawFirst) rejectFirst(err);
        this.emit('mapEnd', err);
        reject(err);
      };
      const finish = (): void => {
        if (settled) return;
        settled = true;
        if (!sawFirst) rejectFirst(new Error('map stream ended before the first MapResponse'));
        this.emit('mapEnd', undefined);
        resolve();
      };
      // A stream closed by stopMap or a dropped session ends without 'end'; treat it as a normal end.
      req.on('close', finish);
      // Node may deliver the first DATA chunk before 'response' when headers and data
      // arrive together; hold chunks until the status is known.
      const early: Buffer[] = [];
      req.on('response', (h) => {
        status = Number(h[':status']);
        for (const c of early.splice(0)) onData(c);
      });
      req.on('data', (chunk: Buffer) => {
        this.mapBytes += chunk.length;
        if (status === 0) early.push(chunk);
        else onData(chunk);
      });
      const onData = (chunk: Buffer): void => {
        if (status !== 200) {
          errorBody += chunk.toString('utf8');
          return;
        }
        let messages: unknown[];
        try {
          messages = decoder.push(chunk);
        } catch (err) {
          fail(err as Error);
          return;
        }
        for (const raw of messages) {
          const msg = raw as MapResponse;
          if (msg.PingRequest) this.onPing(msg.PingRequest);
          applyMapResponse(this.netmap, this.keep ? this.keep(msg) : msg);
          if (isKeepAlive(msg)) {
            this.emit('keepalive', msg);
            continue;
          }
          if (!sawFirst) {
            if (!msg.Node) {
              fail(new Error('initial MapResponse lacked node'));
              return;
            }
            sawFirst = true;
            resolveFirst(msg);
            // The stream's handlers outlive the first message: holding its resolvers would keep the whole first map
            // (with every peer) alive as the promise's result for as long as the stream is open, per device: in the
            // load generator's workers O(devices x peers) of it, more than their heap holds at thousands of devices.
            resolveFirst = rejectFirst = settledFirst;
          }
          this.emit('update', msg);
        }
      };
      req.on('end', () => {
        if (status !== 200) {
          fail(new ControlHttpError('map request', status, errorBody.trim()));
          return;
        }
        if (decoder.leftover > 0) {
          fail(new Error(`map stream ended inside a frame (${decoder.leftover} bytes pending)`));
          return;
        }
        finish();
      });
      req.on('error', (err) => fail(new Error(`map stream: ${err.message}`)));
    });
    // Callers that only use startMap's result must not see an unhandled rejection from mapDone.
    this.mapDone.catch(() => undefined);
    return first;
  }

  /** onPing answers a PingRequest with no Types (tailscaled's answerHeadPing); the 'ping' event gets the status. */
  private onPing(pr: PingRequest): void {
    // Types (disco, TSMP, c2n) and answers over Noise are kinds of ping this device does not play.
    if (!this.answerPings || !pr.URL || pr.URL === this.lastPingUrl || pr.Types || pr.URLIsNoise) return;
    this.lastPingUrl = pr.URL;
    fetch(pr.URL, { method: 'HEAD' }).then((r) => r.status).then((status) => { this.pingAnswers.push(status); this.emit('ping', status); }, (err: Error) => this.emit('ping', err));
  }

  /** stopMap cancels the current map stream, as tailscaled does when it restarts its poll. */
  stopMap(): void {
    if (this.mapStream && !this.mapStream.closed) this.mapStream.close();
    this.mapStream = undefined;
  }

  /** liteUpdate sends a non-streaming OmitPeers map request (endpoint/hostinfo/disco key report); expects 200. */
  async liteUpdate(opts: LiteUpdateOptions = {}): Promise<void> {
    if (opts.discoKey) this.discoKey = opts.discoKey;
    const body = this.buildMapRequest(false, true, opts.endpoints, opts.hostinfo);
    const reply = await this.request('/machine/map', body);
    if (reply.status !== 200) throw new ControlHttpError('lite map update', reply.status, reply.body.toString('utf8').trim());
  }

  /** waitFor resolves with the netmap once predicate holds, checking now and after every applied message. */
  waitFor(predicate: (netmap: NetMap) => boolean, timeoutMs = 5000): Promise<NetMap> {
    if (predicate(this.netmap)) return Promise.resolve(this.netmap);
    return new Promise<NetMap>((resolve, reject) => {
      const check = (): void => {
        if (predicate(this.netmap)) {
          cleanup();
          resolve(this.netmap);
        }
      };
      const onEnd = (err?: Error): void => {
        cleanup();
        reject(new Error(`${this.hostname}: map stream ended while waiting${err ? `: ${err.message}` : ''}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${this.hostname}: netmap condition not met within ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.off('update', check);
        this.off('keepalive', check);
        this.off('mapEnd', onEnd);
      };
      this.on('update', check);
      this.on('keepalive', check);
      this.on('mapEnd', onEnd);
    });
  }

  /** rotateNodeKey switches to a fresh node key and registers it with OldNodeKey = the previous key. */
  async rotateNodeKey(opts: Omit<RegisterOptions, 'oldNodeKey' | 'logout'> = {}): Promise<RegisterResponse> {
    this.previousNodeKey = this.nodeKey;
    this.nodeKey = generateKeyPair();
    return this.register(opts);
  }

  /** logout registers with the past expiry `tailscale logout` sends and stops the map poll. */
  async logout(): Promise<RegisterResponse> {
    this.stopMap();
    return this.register({ logout: true });
  }

  /** close ends the map poll and the Noise connection. */
  async close(): Promise<void> {
    this.stopMap();
    const session = this.session;
    this.session = undefined;
    if (!session || session.destroyed) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        session.destroy();
        resolve();
      }, 1000);
      session.close(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
