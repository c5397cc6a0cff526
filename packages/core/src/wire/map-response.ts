/**
 * The map response as it goes to a device (tailcfg.MapResponse and what it holds), with Go's field names as they
 * appear in the JSON. One definition for the server, which composes these messages, and for the test devices,
 * which read them. Types that name a Go type also used elsewhere in Headway (Node, Hostinfo, FilterRule) carry a
 * `Wire` prefix here; the test kit re-exports them under the Go names.
 */

/** NodeID is a tailcfg.NodeID (int64 on the wire, kept below 2^53). */
export type NodeID = number;
/** UserID is a tailcfg.UserID: the owner a node's `User` names (a user, or the tagged-devices owner). */
export type UserID = number;

/** WireHostinfo is the device's own description, sent back to it and its peers as it reported it. */
export interface WireHostinfo {
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
  /** A device may report fields this server does not read; they are passed on untouched. */
  [field: string]: unknown;
}

/** CapMap is a node's capabilities, each with its (JSON) arguments. */
export type CapMap = Record<string, unknown[] | null>;

/** WireNode is a tailcfg.Node: the map's `Node` (the device itself) and each entry of `Peers`/`PeersChanged`. */
export interface WireNode {
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
  /** DERP is the legacy "127.3.3.40:N" form of HomeDERP. */
  DERP?: string;
  Hostinfo?: WireHostinfo;
  Created?: string;
  Cap?: number;
  Tags?: string[];
  PrimaryRoutes?: string[];
  LastSeen?: string | null;
  Online?: boolean | null;
  MachineAuthorized?: boolean;
  CapMap?: CapMap;
  Expired?: boolean;
}

/** PeerChange patches one peer: only the fields present apply (PeersChangedPatch; control/controlclient/map.go). */
export interface PeerChange {
  NodeID: NodeID;
  DERPRegion?: number;
  Cap?: number;
  CapMap?: CapMap;
  Endpoints?: string[];
  Key?: string;
  KeySignature?: string;
  DiscoKey?: string;
  Online?: boolean;
  LastSeen?: string;
  KeyExpiry?: string;
}

/** UserProfile is an owner as a map shows it (UserProfiles is additive: new and changed profiles only). */
export interface UserProfile {
  ID: UserID;
  LoginName?: string;
  DisplayName?: string;
  ProfilePicURL?: string;
  Groups?: string[];
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

/** DERPMap: regions keyed by their id in decimal; null Regions keeps the regions the client holds. */
export interface DERPMap {
  Regions?: Record<string, DERPRegion> | null;
  HomeParams?: { RegionScore?: Record<string, number> | null } | null;
  omitDefaultRegions?: boolean;
}

export interface DNSResolver {
  Addr?: string;
  BootstrapResolution?: string[];
  UseWithExitNode?: boolean;
}

export interface DNSConfig {
  Resolvers?: DNSResolver[];
  Routes?: Record<string, DNSResolver[] | null>;
  FallbackResolvers?: DNSResolver[];
  Domains?: string[];
  Proxied?: boolean;
  Nameservers?: string[];
  CertDomains?: string[];
  ExtraRecords?: Array<{ Name: string; Type?: string; Value: string }>;
  ExitNodeFilteredSet?: string[];
  [field: string]: unknown;
}

export interface WirePortRange {
  IP: string;
  Bits?: number | null;
  Ports: { First: number; Last: number };
}

export interface WireCapGrant {
  Dsts: string[];
  CapMap?: CapMap;
  Caps?: string[];
}

/** WireFilterRule is a tailcfg.FilterRule: what a packet filter lets in. */
export interface WireFilterRule {
  SrcIPs: string[];
  SrcBits?: number[] | null;
  DstPorts?: WirePortRange[];
  IPProto?: number[];
  CapGrant?: WireCapGrant[];
}

/** SSHPrincipal is who an SSH rule lets in (tailcfg.SSHPrincipal, lower-camel JSON like all the SSH types). */
export interface SSHPrincipal {
  nodeIP?: string;
  node?: string;
  userLogin?: string;
  any?: boolean;
}

/** SSHAction is what an SSH rule does with a connection it matches. */
export interface SSHAction {
  message?: string;
  reject?: boolean;
  accept?: boolean;
  sessionDuration?: number;
  allowAgentForwarding?: boolean;
  holdAndDelegate?: string;
  allowLocalPortForwarding?: boolean;
  allowRemotePortForwarding?: boolean;
  recorders?: string[];
}

export interface SSHRule {
  ruleExpires?: string | null;
  principals: SSHPrincipal[];
  /** sshUsers maps the requested local user to the one logged in as ("*" matches any). */
  sshUsers: Record<string, string>;
  action: SSHAction;
  acceptEnv?: string[];
}

/** SSHPolicy is tailcfg.SSHPolicy: the rules for Tailscale SSH into the node (none: no SSH). */
export interface SSHPolicy {
  rules: SSHRule[];
}

/** MapDebug is tailcfg.Debug: what the control server asks of the client's own diagnostics. */
export interface MapDebug {
  DisableLogTail?: boolean;
  RandomizeClientPort?: boolean;
  SleepSeconds?: number;
  Exit?: number;
}

/**
 * MapResponse is one message of a map stream. The first must hold Node and DERPMap; every later one holds only what
 * changed (see control-protocol.md §6.5 for what absence, null and empty mean field by field).
 */
/**
 * PingRequest (tailcfg.PingRequest) asks the client to prove it is reachable: with no Types it sends HTTP HEAD to
 * URL, over Noise when URLIsNoise is set, else over its plain HTTP(S) client; a URL equal to the last one is ignored.
 */
export interface PingRequest {
  URL: string;
  URLIsNoise?: boolean;
  Log?: boolean;
  Types?: string;
  IP?: string;
}

export interface MapResponse {
  KeepAlive?: boolean;
  Node?: WireNode;
  DERPMap?: DERPMap | null;
  /** Peers, when non-empty, replaces every peer the client holds (the first message). */
  Peers?: WireNode[];
  PeersChanged?: WireNode[];
  PeersRemoved?: NodeID[];
  PeersChangedPatch?: PeerChange[];
  /** PeerSeenChange and OnlineChange are the older per-peer deltas, keyed by node id in decimal. */
  PeerSeenChange?: Record<string, boolean>;
  OnlineChange?: Record<string, boolean>;
  DNSConfig?: DNSConfig | null;
  Domain?: string;
  CollectServices?: boolean | null;
  /** PacketFilter replaces the filter list named "base"; PacketFilters sets named lists (null drops one). */
  PacketFilter?: WireFilterRule[] | null;
  PacketFilters?: Record<string, WireFilterRule[] | null> | null;
  UserProfiles?: UserProfile[];
  SSHPolicy?: SSHPolicy | null;
  ControlTime?: string;
  Debug?: MapDebug;
  PingRequest?: PingRequest;
  PopBrowserURL?: string;
}
