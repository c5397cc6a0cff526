import type { DERPMap, DNSConfig, FilterRule, MapResponse, Node, NodeID, SSHPolicy, UserProfile } from './wire.js';

/** NetMap is the client's view assembled from every MapResponse of one map session. */
export interface NetMap {
  self: Node | undefined;
  peers: Map<NodeID, Node>;
  /** packetFilter is every named filter list concatenated in name order, as the client evaluates it. */
  packetFilter: FilterRule[];
  packetFilters: Map<string, FilterRule[]>;
  dnsConfig: DNSConfig | undefined;
  derpMap: DERPMap | undefined;
  sshPolicy: SSHPolicy | undefined;
  userProfiles: Map<number, UserProfile>;
  domain: string | undefined;
  collectServices: boolean | undefined;
  controlTime: string | undefined;
  /** messages counts non-keepalive MapResponses applied; keepAlives counts bare keep-alives. */
  messages: number;
  keepAlives: number;
}

/**
 * FILTER_STALE names, on a netmap made by emptyNetMap, the function applyMapResponse calls when the named filter lists
 * changed: packetFilter is concatenated again when next read, not on every message. A benchmark device never reads
 * it, and sorting every chunk name on every filter update would be a visible share of the load generator's CPU.
 */
const FILTER_STALE = Symbol('filterStale');

/** emptyNetMap is the state before the first MapResponse; peers may be a Map of the caller's (bench-compact.ts in @headway/bench). */
export function emptyNetMap(peers: Map<NodeID, Node> = new Map()): NetMap {
  let filter: FilterRule[] = [];
  let stale = false;
  const nm: NetMap = {
    self: undefined,
    peers,
    get packetFilter(): FilterRule[] {
      if (stale) { filter = concatPacketFilters(nm.packetFilters); stale = false; }
      return filter;
    },
    set packetFilter(rules: FilterRule[]) { filter = rules; stale = false; },
    packetFilters: new Map(),
    dnsConfig: undefined,
    derpMap: undefined,
    sshPolicy: undefined,
    userProfiles: new Map(),
    domain: undefined,
    collectServices: undefined,
    controlTime: undefined,
    messages: 0,
    keepAlives: 0,
  };
  // Not enumerable: a copy ({...nm}) holds the filter as read then, and applyMapResponse concatenates its own.
  Object.defineProperty(nm, FILTER_STALE, { value: () => { stale = true; } });
  return nm;
}

/** isKeepAlive reports a keep-alive; like tailscaled, every other field of such a message (but ControlTime) is ignored. */
export function isKeepAlive(msg: MapResponse): boolean {
  return msg.KeepAlive === true;
}

/**
 * applyPacketFilters applies a message's packet filter to the named lists the client holds, as tailscaled's map
 * session does: PacketFilter replaces the list named "base"; in PacketFilters a null value drops its name, and
 * `"*": null` drops every name first. True when the message carried a filter.
 */
export function applyPacketFilters(named: Map<string, FilterRule[]>, msg: Pick<MapResponse, 'PacketFilter' | 'PacketFilters'>): boolean {
  if (msg.PacketFilter != null) named.set('base', msg.PacketFilter);
  const chunks = msg.PacketFilters;
  if (chunks != null) {
    if ('*' in chunks && chunks['*'] == null) named.clear();
    for (const [name, rules] of Object.entries(chunks)) {
      if (name === '*') continue;
      if (rules != null) named.set(name, rules);
      else named.delete(name);
    }
  }
  return msg.PacketFilter != null || chunks != null;
}

/** concatPacketFilters is the named lists concatenated in name order, the filter the client evaluates. */
export function concatPacketFilters(named: Map<string, FilterRule[]>): FilterRule[] {
  return [...named.keys()].sort().flatMap((name) => named.get(name)!);
}

/**
 * applyMapResponse folds one MapResponse into the netmap with the delta rules of tailscale's
 * control/controlclient/map.go: a non-empty Peers replaces all peers and pre-empts every other peer delta;
 * otherwise PeersRemoved, PeersChanged (whole nodes, no merging), PeerSeenChange, OnlineChange and
 * PeersChangedPatch apply in that order. Null/absent top-level fields mean "unchanged".
 */
export function applyMapResponse(nm: NetMap, msg: MapResponse, now: Date = new Date()): void {
  if (msg.ControlTime) nm.controlTime = msg.ControlTime;
  if (isKeepAlive(msg)) {
    nm.keepAlives++;
    return;
  }
  nm.messages++;
  if (msg.Node) nm.self = msg.Node;

  if (msg.DERPMap) {
    const next: DERPMap = { ...msg.DERPMap };
    const prev = nm.derpMap;
    if (prev) {
      if (next.Regions == null) {
        next.Regions = prev.Regions;
        next.omitDefaultRegions = prev.omitDefaultRegions;
      }
      if (next.HomeParams == null) next.HomeParams = prev.HomeParams;
      else if (next.HomeParams.RegionScore == null && prev.HomeParams?.RegionScore) {
        next.HomeParams = { ...next.HomeParams, RegionScore: prev.HomeParams.RegionScore };
      }
    }
    nm.derpMap = next;
  }

  if (applyPacketFilters(nm.packetFilters, msg)) {
    const stale = (nm as Partial<Record<typeof FILTER_STALE, () => void>>)[FILTER_STALE];
    if (stale) stale();
    else nm.packetFilter = concatPacketFilters(nm.packetFilters);
  }

  if (msg.DNSConfig != null) nm.dnsConfig = msg.DNSConfig;
  if (msg.SSHPolicy != null) nm.sshPolicy = msg.SSHPolicy;
  if (msg.CollectServices != null) nm.collectServices = msg.CollectServices;
  if (msg.Domain) nm.domain = msg.Domain;
  for (const profile of msg.UserProfiles ?? []) nm.userProfiles.set(profile.ID, profile);

  applyPeerDeltas(nm.peers, msg, now);
}

function applyPeerDeltas(peers: Map<NodeID, Node>, msg: MapResponse, now: Date): void {
  if (msg.Peers && msg.Peers.length > 0) {
    peers.clear();
    for (const node of msg.Peers) peers.set(node.ID, node);
    return;
  }
  for (const id of msg.PeersRemoved ?? []) peers.delete(id);
  for (const node of msg.PeersChanged ?? []) peers.set(node.ID, node);
  for (const [id, seen] of Object.entries(msg.PeerSeenChange ?? {})) {
    const node = peers.get(Number(id));
    if (node) peers.set(node.ID, { ...node, LastSeen: seen ? now.toISOString() : null });
  }
  for (const [id, online] of Object.entries(msg.OnlineChange ?? {})) {
    const node = peers.get(Number(id));
    if (node) peers.set(node.ID, { ...node, Online: online });
  }
  for (const change of msg.PeersChangedPatch ?? []) {
    const node = peers.get(change.NodeID);
    if (!node) continue; // unknown peers are ignored, as the client does
    const next: Node = { ...node };
    if (change.DERPRegion) next.HomeDERP = change.DERPRegion;
    if (change.Cap) next.Cap = change.Cap;
    if (change.Endpoints != null) next.Endpoints = change.Endpoints;
    if (change.Key != null) next.Key = change.Key;
    if (change.DiscoKey != null) next.DiscoKey = change.DiscoKey;
    if (change.Online != null) next.Online = change.Online;
    if (change.LastSeen != null) next.LastSeen = change.LastSeen;
    if (change.KeyExpiry != null) next.KeyExpiry = change.KeyExpiry;
    if (change.KeySignature != null) next.KeySignature = change.KeySignature;
    if (change.CapMap != null) next.CapMap = change.CapMap;
    peers.set(change.NodeID, next);
  }
}
