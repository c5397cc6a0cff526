import type { IncomingMessage } from 'node:http';
import type { HandshakeFailureLogOptions } from './failurelog.js';

/** DerpLogger is the slice of a structured logger the relay writes to; @headway/core's Logger fits. */
export interface DerpLogger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * DerpClientInfo describes a client asking to be admitted: what it declared in
 * its sealed ClientInfo JSON and where it came from. For `transport: 'verify'`
 * (an external derper asking the control server) only remoteAddress is known.
 */
export interface DerpClientInfo {
  transport: 'derp' | 'websocket' | 'verify';
  version?: number;
  canAckPings?: boolean;
  isProber?: boolean;
  meshKey?: string;
  remoteAddress?: string;
}

/** VerifyClient decides admission for a node key (`nodekey:<hex>`) after it proved ownership of it. */
export type VerifyClient = (nodePublicKey: string, info: DerpClientInfo) => Promise<boolean>;

export interface DerpServerOptions {
  privateKey: Buffer;
  verifyClient?: VerifyClient;
  /** keepAliveMs is the KeepAlive period (default 60 s, plus up to 5 s of jitter like tailscale). */
  keepAliveMs?: number;
  /** sendQueueDepth caps packets buffered per client beyond the socket's own buffer (default 32). */
  sendQueueDepth?: number;
  /** loginTimeoutMs bounds how long a connection may take to log in (default 10 s). */
  loginTimeoutMs?: number;
  logger?: DerpLogger;
  /** handshakeLog tunes the rate limit on lines about failed connection attempts. */
  handshakeLog?: HandshakeFailureLogOptions;
  /**
   * maxUnauthenticatedPerAddress caps connections from one source (an IPv4 address or an IPv6 /64)
   * that have not logged in yet; past it an upgrade gets HTTP 429 (default 1,000).
   */
  maxUnauthenticatedPerAddress?: number;
  /**
   * loginRate and loginBurst bound the logins (ClientInfo frames, each a public-key box to open)
   * one source may attempt: loginBurst at once, loginRate per second after that; a login over the
   * rate is refused, connection closed, before its box is opened (defaults 100 and 1,000).
   */
  loginRate?: number;
  loginBurst?: number;
  /**
   * clientAddress names the client of an upgrade request, what per-address limits and logs use (the
   * server's trusted_proxies); default: the TCP peer.
   */
  clientAddress?: (req: IncomingMessage) => string | undefined;
  /** now is the clock of the login rate limit (tests inject one; default Date.now). */
  now?: () => number;
  /**
   * meshKey, when set, is the secret the other relays of this region present in their
   * ClientInfo: a client showing it is a trusted mesh peer (admitted without verifyClient)
   * and may watch connections (WatchConns) and forward packets (ForwardPacket, ClosePeer).
   * Without it every mesh frame is a protocol error.
   */
  meshKey?: string;
}

/**
 * MeshForwarder carries packets to a node connected to another relay of the region
 * (a mesh peer connection); forwardPacket returns false when it had to drop the packet.
 */
export interface MeshForwarder {
  forwardPacket(src: Buffer, dst: Buffer, packet: Buffer): boolean;
}

/** DerpServerStats are cumulative counters, useful for tests and metrics. */
export interface DerpServerStats {
  accepts: number;
  packetsReceived: number;
  packetsForwarded: number;
  packetsDroppedUnknownDest: number;
  packetsDroppedQueueFull: number;
  packetsDroppedGone: number;
  peerGoneDisconnectedFrames: number;
  peerGoneNotHereFrames: number;
  pings: number;
  loginFailures: number;
  protocolErrors: number;
  unknownFrames: number;
  /** packetsMeshForwarded counts packets handed to a mesh peer for a node connected to another relay. */
  packetsMeshForwarded: number;
  /** packetsMeshDropped counts packets a mesh peer could not take (disconnected or backed up). */
  packetsMeshDropped: number;
  /** packetsFromMesh counts ForwardPacket frames delivered to a local client. */
  packetsFromMesh: number;
  /** connectionsRefusedPerAddress counts connections refused because their address had too many not logged in yet. */
  connectionsRefusedPerAddress: number;
  /** loginsRateLimited counts login frames refused, unopened, because their address was over the login rate. */
  loginsRateLimited: number;
}

export interface RestartNotice {
  /** reconnectInMs advises clients how long to wait before reconnecting. */
  reconnectInMs?: number;
  /** tryForMs advises clients how long to keep trying before normal failure handling. */
  tryForMs?: number;
}

/**
 * DERP_LOGIN_LIMITS are the defaults of the per-address limits on clients that have not logged in
 * (Headway's config sets them from derp.server.*, whose docs in core's keys.ts give the reasons).
 */
export const DERP_LOGIN_LIMITS = { maxUnauthenticatedPerAddress: 1000, loginRate: 100, loginBurst: 1000 } as const;

export const silentLogger: DerpLogger = { debug() {}, info() {}, warn() {} };

/** newStats is a zeroed DerpServerStats; the relay's parts all count into the one object. */
export function newStats(): DerpServerStats {
  return {
    accepts: 0,
    packetsReceived: 0,
    packetsForwarded: 0,
    packetsDroppedUnknownDest: 0,
    packetsDroppedQueueFull: 0,
    packetsDroppedGone: 0,
    peerGoneDisconnectedFrames: 0,
    peerGoneNotHereFrames: 0,
    pings: 0,
    loginFailures: 0,
    protocolErrors: 0,
    unknownFrames: 0,
    packetsMeshForwarded: 0,
    packetsMeshDropped: 0,
    packetsFromMesh: 0,
    connectionsRefusedPerAddress: 0,
    loginsRateLimited: 0,
  };
}
