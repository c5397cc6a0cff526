/**
 * Wire types of the Tailscale control protocol as tailscaled sends and receives them (Go field names,
 * JSON). Only the fields tests and benchmarks look at are spelled out; the index signatures keep
 * everything else a device reports instead of dropping it.
 */

/**
 * The map response and what it holds are Headway's own definition (@headway/core, wire/map-response.ts), which the
 * server composes its messages with; here they keep the Go names the tests use.
 */
export type {
  CapMap, DERPMap, DERPNode, DERPRegion, DNSConfig, MapDebug, MapResponse, NodeID, PeerChange, PingRequest, SSHAction, SSHPolicy, SSHPrincipal,
  SSHRule, UserID, UserProfile,
  DNSResolver as Resolver, WireCapGrant as CapGrant, WireFilterRule as FilterRule, WireHostinfo as Hostinfo, WireNode as Node,
  WirePortRange as NetPortRange,
} from '@headway/core';
import type { WireHostinfo as Hostinfo } from '@headway/core';

export interface User {
  ID: number;
  DisplayName?: string;
  ProfilePicURL?: string;
  Created?: string;
}

export interface Login {
  ID: number;
  Provider?: string;
  LoginName?: string;
  DisplayName?: string;
  ProfilePicURL?: string;
}

export interface MapRequest {
  Version: number;
  Compress: string;
  KeepAlive: boolean;
  NodeKey: string;
  DiscoKey: string;
  Stream: boolean;
  OmitPeers: boolean;
  Hostinfo: Hostinfo;
  Endpoints?: string[];
  EndpointTypes?: number[];
  DebugFlags?: string[];
  MapSessionHandle?: string;
  MapSessionSeq?: number;
  ReadOnly?: boolean;
}

export interface RegisterRequest {
  Version: number;
  NodeKey: string;
  OldNodeKey: string;
  NLKey?: string;
  Auth?: { AuthKey?: string; Provider?: string; LoginName?: string } | null;
  Expiry: string;
  Followup: string;
  Hostinfo: Hostinfo;
  Ephemeral: boolean;
  NodeKeySignature?: string | null;
  Timestamp?: string;
  Tailnet?: string;
}

export interface RegisterResponse {
  User?: User;
  Login?: Login;
  NodeKeyExpired?: boolean;
  MachineAuthorized?: boolean;
  AuthURL?: string;
  Error?: string;
  [field: string]: unknown;
}

/** ZERO_TIME is Go's zero time.Time, which the server must read as "unset". */
export const ZERO_TIME = '0001-01-01T00:00:00Z';
/** LOGOUT_EXPIRY is the past expiry `tailscale logout` sends. */
export const LOGOUT_EXPIRY = '1970-01-01T00:02:03Z';
