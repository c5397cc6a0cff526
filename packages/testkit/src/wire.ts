/**
 * Wire types of the Tailscale control protocol as tailscaled sends and receives them (Go field names,
 * JSON). Only the fields tests and benchmarks look at are spelled out; the index signatures keep
 * everything else the server sends instead of dropping it.
 */

/** NodeID is a tailcfg.NodeID (int64 on the wire, kept below 2^53). */
export type NodeID = number;
export type UserID = number;

export interface Hostinfo {
  IPNVersion?: string;
  FrontendLogID?: string;
  BackendLogID?: string;
  OS?: string;
  OSVersion?: string;
  Hostname?: string;
  GoArch?: string;
  RoutableIPs?: string[];
  RequestTags?: string[];
  Services?: Array<{ Proto: string; Port: number; Description?: string }>;
  NetInfo?: { PreferredDERP?: number; [field: string]: unknown };
  [field: string]: unknown;
}

export interface Node {
  ID: NodeID;
  StableID?: string;
  Name?: string;
  User?: UserID;
  Sharer?: UserID;
  Key?: string;
  KeyExpiry?: string;
  KeySignature?: string;
  Machine?: string;
  DiscoKey?: string;
  Addresses?: string[];
  AllowedIPs?: string[] | null;
  Endpoints?: string[];
  HomeDERP?: number;
  DERP?: string;
  Hostinfo?: Hostinfo;
  Created?: string;
  Cap?: number;
  Tags?: string[];
  PrimaryRoutes?: string[];
  LastSeen?: string | null;
  Online?: boolean | null;
  MachineAuthorized?: boolean;
  CapMap?: Record<string, unknown[] | null>;
  Expired?: boolean;
  [field: string]: unknown;
}

/** PeerChange patches one peer; only present fields apply (control/controlclient/map.go). */
export interface PeerChange {
  NodeID: NodeID;
  DERPRegion?: number;
  Cap?: number;
  CapMap?: Record<string, unknown[] | null>;
  Endpoints?: string[];
  Key?: string;
  KeySignature?: string;
  DiscoKey?: string;
  Online?: boolean;
  LastSeen?: string;
  KeyExpiry?: string;
}

export interface UserProfile {
  ID: UserID;
  LoginName?: string;
  DisplayName?: string;
  ProfilePicURL?: string;
  Groups?: string[];
}

export interface User {
  ID: UserID;
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

export interface DERPNode {
  Name: string;
  RegionID: number;
  HostName: string;
  CertName?: string;
  IPv4?: string;
  IPv6?: string;
  STUNPort?: number;
  STUNOnly?: boolean;
  DERPPort?: number;
  CanPort80?: boolean;
  InsecureForTests?: boolean;
  [field: string]: unknown;
}

export interface DERPRegion {
  RegionID: number;
  RegionCode: string;
  RegionName?: string;
  Latitude?: number;
  Longitude?: number;
  Avoid?: boolean;
  NoMeasureNoHome?: boolean;
  Nodes: DERPNode[];
}

export interface DERPMap {
  Regions?: Record<string, DERPRegion> | null;
  HomeParams?: { RegionScore?: Record<string, number> | null } | null;
  omitDefaultRegions?: boolean;
}

export interface Resolver {
  Addr?: string;
  BootstrapResolution?: string[];
  UseWithExitNode?: boolean;
}

export interface DNSConfig {
  Resolvers?: Resolver[];
  Routes?: Record<string, Resolver[] | null>;
  FallbackResolvers?: Resolver[];
  Domains?: string[];
  Proxied?: boolean;
  Nameservers?: string[];
  CertDomains?: string[];
  ExtraRecords?: Array<{ Name: string; Type?: string; Value: string }>;
  ExitNodeFilteredSet?: string[];
  [field: string]: unknown;
}

export interface NetPortRange {
  IP: string;
  Bits?: number | null;
  Ports: { First: number; Last: number };
}

export interface CapGrant {
  Dsts: string[];
  CapMap?: Record<string, unknown[] | null>;
  Caps?: string[];
}

export interface FilterRule {
  SrcIPs: string[];
  SrcBits?: number[] | null;
  DstPorts?: NetPortRange[];
  IPProto?: number[];
  CapGrant?: CapGrant[];
}

/** SSHPolicy is passed through untouched (lower-camel JSON, see tailcfg.SSHPolicy). */
export interface SSHPolicy {
  rules: Array<Record<string, unknown>>;
}

export interface MapResponse {
  KeepAlive?: boolean;
  Node?: Node;
  DERPMap?: DERPMap | null;
  Peers?: Node[];
  PeersChanged?: Node[];
  PeersRemoved?: NodeID[];
  PeersChangedPatch?: PeerChange[];
  PeerSeenChange?: Record<string, boolean>;
  OnlineChange?: Record<string, boolean>;
  DNSConfig?: DNSConfig | null;
  Domain?: string;
  CollectServices?: boolean | null;
  PacketFilter?: FilterRule[] | null;
  PacketFilters?: Record<string, FilterRule[] | null> | null;
  UserProfiles?: UserProfile[];
  SSHPolicy?: SSHPolicy | null;
  ControlTime?: string;
  Debug?: Record<string, unknown>;
  PingRequest?: Record<string, unknown>;
  PopBrowserURL?: string;
  [field: string]: unknown;
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
