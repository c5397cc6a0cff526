import type { DERPMap, DNSConfig, HeadwayConfig, MapDebug, SSHPolicy, UserProfile, WireFilterRule, WireHostinfo, WireNode } from '@headway/core';
import { ownedByTags, ownerIdentity, TAGGED_USER_ID, type Node, type OwnerIdentity, type User } from '@headway/core';
import type { State } from '@headway/core';
import type { DerpMapSource } from './derpmap.js';
import type { DnsConfigSource } from './dns.js';
import { addresses, type MapResponse, type NetworkView } from '@headway/core';
import { filterChunksJson } from './filter-chunks.js';
import { compressJson, frame, prefixedPieces, sharedFrameMinInForce, type WireMessage } from './frames.js';
import { aroundList, encode, encoded, jsonArray, mapResponse, member, type Json } from './map-json.js';
import { PEER_BLOCK_IDS } from './fanout-knobs.js';
import { PeerBlockFrames } from './peer-blocks.js';

/** profileJson is an owner as a tailcfg.UserProfile in a map response (with the user's picture when one is set). */
function profileJson(o: OwnerIdentity): Json<UserProfile> {
  return encode<UserProfile>(o.profilePicUrl
    ? { ID: o.id, LoginName: o.loginName, DisplayName: o.displayName, ProfilePicURL: o.profilePicUrl }
    : { ID: o.id, LoginName: o.loginName, DisplayName: o.displayName });
}

/** LoggedOutSelf is what a logged-out answer says about the machine's (former) node. */
export interface LoggedOutSelf {
  id: number;
  name: string;
  userId: number;
  /** profile is the owner's UserProfile JSON, when known. */
  profile?: Json<UserProfile>;
  nodeKey: string;
  machineKey: string;
  hostinfo: WireHostinfo | null;
  createdAt?: Date;
}

const COMMA = Buffer.from(',');

/** PeerBytes is a peer's text as UTF-8 and a serial number naming that text (see PeerBlockFrames). */
interface PeerBytes { bytes: Buffer; serial: number }

/** LOGGED_OUT_EXPIRY is the key expiry `tailscale logout` sends (Unix 123): "logged out" to every client. */
export const LOGGED_OUT_EXPIRY = '1970-01-01T00:02:03Z';

/** FILE_SHARING_CAP lets a node send files to its owner's other devices (Taildrop); taildrop.enabled: false withholds it. */
const FILE_SHARING_CAP = 'https://tailscale.com/cap/file-sharing';

/** HTTPS_CAP (tailcfg.CapabilityHTTPS) tells a client it may get certificates for its CertDomains (`tailscale serve` checks it). */
const HTTPS_CAP = 'https';

/** Capabilities every node receives about itself, whatever the policy says. */
const BASE_SELF_CAPS: Record<string, unknown[]> = {
  'https://tailscale.com/cap/is-admin': [],
  'https://tailscale.com/cap/ssh': [],
  [FILE_SHARING_CAP]: [],
  // Keeps clients from probing for captive portals on networks they cannot reach.
  'disable-captive-portal-detection': [],
};

/**
 * Mapper turns nodes into the JSON the client reads. Each peer is serialized once
 * per change (cached until the node, its online state or its routes change) and
 * spliced into every recipient's message as text.
 */
export class Mapper {
  private readonly peerJson = new Map<number, Json<WireNode>>();
  /** peerBytes holds the UTF-8 of peerJson entries that went into a full map, cached and forgotten with them. */
  private readonly peerBytes = new Map<number, PeerBytes>();
  private peerSerial = 0;
  /** peerBlocks are full maps' large peer blocks, compressed once for every joiner they go to (see fullMapMessage). */
  readonly peerBlocks = new PeerBlockFrames();

  constructor(
    private readonly state: State,
    private readonly config: HeadwayConfig,
    readonly view: NetworkView,
    private readonly dns: DnsConfigSource,
    private readonly derp: DerpMapSource,
  ) {}

  forget(id: number): void { this.peerJson.delete(id); this.peerBytes.delete(id); }

  /**
   * selfCaps are BASE_SELF_CAPS, without file sharing when taildrop.enabled is false (headscale drops the capability
   * too), and with HTTPS_CAP when dns.certificates.enabled.
   */
  private selfCaps(): Record<string, unknown[]> {
    const caps = this.config.dns.certificates.enabled ? { ...BASE_SELF_CAPS, [HTTPS_CAP]: [] } : BASE_SELF_CAPS;
    if (this.config.taildrop?.enabled !== false) return caps;
    const { [FILE_SHARING_CAP]: _off, ...rest } = caps;
    return rest;
  }
  /** dnsConfig is the DNSConfig a node receives: the shared one (no node given), with the node's own CertDomains when certificates are on. */
  dnsConfig(node?: Node): DNSConfig { return node ? this.dns.configFor(node.givenName) : this.dns.config(); }
  /** certDomain is the name `node` may get a certificate for (undefined: certificates are off). */
  certDomain(node: Node): string | undefined { return this.dns.certDomain(node.givenName); }
  /** derpMapJson is the DERP map for a client's capability version (older clients cannot pin the relay certificate). */
  derpMapJson(capVersion: number | undefined): Json<DERPMap> { return encoded<DERPMap>(this.derp.jsonFor(capVersion)); }
  forgetAll(): void { this.peerJson.clear(); this.peerBytes.clear(); }

  fqdn(node: Node): string {
    return this.config.dns.base_domain ? `${node.givenName}.${this.config.dns.base_domain}.` : `${node.givenName}.`;
  }

  private nodeObject(node: Node, self: boolean, capVersion?: number): WireNode {
    const addrs = addresses(node);
    const hostinfo: WireHostinfo = node.hostinfo ?? { Hostname: node.hostname };
    const netinfo = hostinfo.NetInfo;
    const online = this.state.presence.isOnline(node.id);
    const o: WireNode = {
      ID: node.id,
      StableID: String(node.id),
      Name: this.fqdn(node),
      User: this.owner(node).id,
      Key: node.nodeKey,
      Machine: node.machineKey,
      Addresses: addrs,
      AllowedIPs: this.view.allowedIPs(node),
      Endpoints: node.endpoints,
      Hostinfo: hostinfo,
      Created: node.createdAt.toISOString(),
      MachineAuthorized: true,
      Online: online,
    };
    if (node.discoKey) o.DiscoKey = node.discoKey;
    if (netinfo?.PreferredDERP) o.HomeDERP = netinfo.PreferredDERP;
    if (node.expiry) o.KeyExpiry = node.expiry.toISOString();
    if (node.expiry && node.expiry.getTime() <= Date.now()) o.Expired = true;
    if (node.tags.length) o.Tags = node.tags;
    const primary = this.view.primaryRoutes(node.id);
    if (primary.length) o.PrimaryRoutes = primary;
    if (!online && node.lastSeen) o.LastSeen = node.lastSeen.toISOString();
    if (capVersion) o.Cap = capVersion;
    const compiled = this.view.forNode(node.id);
    o.CapMap = self ? { ...this.selfCaps(), ...compiled.capMap } : { ...compiled.capMap };
    return o;
  }

  /** peer is the cached JSON text of a node as its peers see it. */
  peer(node: Node): Json<WireNode> {
    let s = this.peerJson.get(node.id);
    if (s === undefined) {
      s = encode(this.nodeObject(node, false));
      this.peerJson.set(node.id, s);
    }
    return s;
  }

  /** peerBuffer is peer() as UTF-8, so a full map is assembled by copying bytes rather than joining and re-encoding text. */
  private peerBuffer(node: Node): Buffer {
    return this.peerBytesOf(node).bytes;
  }

  /** peerBytesOf is peerBuffer with the serial number of that text (a new one each time the peer's text is made). */
  private peerBytesOf(node: Node): PeerBytes {
    let b = this.peerBytes.get(node.id);
    if (b === undefined) {
      b = { bytes: Buffer.from(this.peer(node)), serial: ++this.peerSerial };
      this.peerBytes.set(node.id, b);
    }
    return b;
  }

  selfNode(node: Node, capVersion?: number): Json<WireNode> {
    return encode(this.nodeObject(node, true, capVersion));
  }

  private owner(node: Node): OwnerIdentity {
    return ownerIdentity(node, node.userId !== null ? this.state.users.get(node.userId) : undefined);
  }

  /** ownerId is the id of the UserProfile a node's `User` field points at. */
  ownerId(node: Node): number { return this.owner(node).id; }

  /**
   * profileTexts hold the latest UserProfile text of each owner id, so equal texts are one string: every idle
   * session keeps the texts it sent (MapSession.profiles), and a copy of each per session would cost a few hundred
   * bytes a device. Only the latest text per owner is held (owners are few: users and tag sets).
   */
  private readonly profileTexts = new Map<number, Json<UserProfile>>();

  /** profileText is profileJson of an owner, as the one string held for equal texts. */
  private profileText(o: OwnerIdentity): Json<UserProfile> {
    const text = profileJson(o);
    const held = this.profileTexts.get(o.id);
    if (held === text) return held;
    this.profileTexts.set(o.id, text);
    return text;
  }

  /** profile is the UserProfile JSON of a node's owner, keyed by its id (a session compares the text it last sent). */
  profile(node: Node): { id: number; json: Json<UserProfile> } {
    const o = this.owner(node);
    return { id: o.id, json: this.profileText(o) };
  }

  /** userProfile is the UserProfile JSON of a user as the owner of untagged nodes (after a rename, say). */
  userProfile(user: User): Json<UserProfile> {
    return this.profileText(ownerIdentity({ tags: [], userId: user.id }, user));
  }

  /** profiles is every distinct owner profile of nodes, by owner id; each owner is serialized once, not once per node. */
  profiles(nodes: Node[]): Map<number, Json<UserProfile>> {
    const out = new Map<number, Json<UserProfile>>();
    // Owners are few (users, and one for tagged devices) against thousands of peers: a node whose owner key was
    // seen adds nothing and builds no owner identity (one per peer per new session would be most of a join's cost
    // in a large tailnet). A user id whose user is gone resolves, once, to the tagged owner as owner() says.
    const seen = new Set<number>();
    for (const n of nodes) {
      const key = ownedByTags(n) ? TAGGED_USER_ID : n.userId!;
      if (seen.has(key)) continue;
      seen.add(key);
      const o = this.owner(n);
      if (!out.has(o.id)) out.set(o.id, this.profileText(o));
    }
    return out;
  }

  profilesFor(nodes: Node[]): Json<UserProfile[]> {
    return jsonArray([...this.profiles(nodes).values()]);
  }

  /** domain is the tailnet name every full map carries (resending it unchanged is harmless). */
  domain(): string { return this.config.dns.base_domain || 'headway.local'; }

  /**
   * loggedOutMap is what a machine whose node no longer exists is told: its own
   * node, without addresses, with a key that expired long ago, which every
   * supported client turns into NeedsLogin (a map error would only make it retry,
   * still Running). The expiry is the one `tailscale logout` itself sends, far
   * enough in the past for any client clock. `gone` lists the peers it still
   * holds; a first message (`first`) also carries the DERP map, without which the
   * client drops its relay and does not reconnect it after the next login.
   */
  loggedOutMap(self: LoggedOutSelf, capVersion: number | undefined, opts: { gone?: number[]; first?: boolean } = {}): Json<MapResponse> {
    const node: WireNode = {
      ID: self.id,
      StableID: String(self.id),
      Name: self.name,
      User: self.userId,
      Key: self.nodeKey,
      Machine: self.machineKey,
      Addresses: [],
      AllowedIPs: [],
      Hostinfo: self.hostinfo ?? {},
      KeyExpiry: LOGGED_OUT_EXPIRY,
      MachineAuthorized: true,
    };
    if (self.createdAt) node.Created = self.createdAt.toISOString();
    if (capVersion) node.Cap = capVersion;
    const members = [member('Node', encode(node))];
    if (opts.first) {
      members.push(member('DERPMap', this.derpMapJson(capVersion)), member('Domain', encode(this.domain())));
      if (self.profile) members.push(member('UserProfiles', jsonArray([self.profile])));
    }
    if (opts.gone?.length) members.push(member('PeersRemoved', encode(opts.gone)));
    members.push(member('ControlTime', encode(new Date().toISOString())));
    return mapResponse(members);
  }

  /** deletedSelf is the logged-out self node of a node that was just deleted. */
  deletedSelf(node: Node): LoggedOutSelf {
    const p = this.profile(node);
    return {
      id: node.id, name: this.fqdn(node), userId: p.id, profile: p.json, nodeKey: node.nodeKey, machineKey: node.machineKey,
      hostinfo: node.hostinfo, createdAt: node.createdAt,
    };
  }

  /** filterJson is a node's whole packet filter as one list (sessions are sent it in chunks, see filter-chunks.ts). */
  filterJson(id: number): Json<WireFilterRule[]> { return encode<WireFilterRule[]>(this.view.forNode(id).packetFilter); }
  sshJson(id: number): Json<SSHPolicy> { return encode<SSHPolicy>(this.view.forNode(id).sshPolicy ?? { rules: [] }); }

  /** fullMap is the complete first message of a session (the client requires Node and DERPMap), as text. */
  fullMap(node: Node, capVersion: number | undefined): string {
    return this.fullMapBytes(node, capVersion).toString('utf8');
  }

  /**
   * fullMapBytes is fullMap as the UTF-8 a frame carries. Every join sends one, with every peer in it, so the
   * peers are copied in as their cached bytes: joining their text into one string and encoding it again
   * cost more than the compression that follows.
   */
  fullMapBytes(node: Node, capVersion: number | undefined): Buffer {
    const { head, peers, tail } = this.fullMapParts(node, capVersion);
    const chunks: Buffer[] = [head];
    peers.forEach((p, i) => {
      if (i) chunks.push(COMMA);
      chunks.push(this.peerBuffer(p));
    });
    chunks.push(tail);
    return Buffer.concat(chunks);
  }

  /**
   * fullMapMessage is the full map as it goes on the stream (see frame). To a zstd session the peers go in blocks by
   * node id (PEER_BLOCK_IDS), each block of SHARED_FRAME_MIN or more a frame compressed once and sent to every joiner holding the same
   * peers in it (PeerBlockFrames), around frames of the joiner's own text: the body decodes to fullMapBytes' text.
   */
  fullMapMessage(node: Node, capVersion: number | undefined, zstd: boolean): WireMessage {
    if (!zstd) return frame(this.fullMapBytes(node, capVersion), false);
    const { head, peers, tail } = this.fullMapParts(node, capVersion);
    const bodies: Uint8Array[] = [];
    let own: Buffer[] = [head];
    const ids: number[] = [];
    const serials: number[] = [];
    const bufs: Buffer[] = [];
    const min = sharedFrameMinInForce();
    for (let a = 0; a < peers.length;) {
      if (a) own.push(COMMA);
      const block = Math.floor(peers[a]!.id / PEER_BLOCK_IDS);
      ids.length = 0;
      serials.length = 0;
      bufs.length = 0;
      let length = -1;
      for (; a < peers.length && Math.floor(peers[a]!.id / PEER_BLOCK_IDS) === block; a++) {
        const b = this.peerBytesOf(peers[a]!);
        ids.push(peers[a]!.id);
        serials.push(b.serial);
        bufs.push(b.bytes);
        length += b.bytes.length + 1;
      }
      if (length >= min) {
        bodies.push(compressJson(Buffer.concat(own)));
        own = [];
        bodies.push(this.peerBlocks.frameOf(block, ids, serials, bufs));
      } else {
        bufs.forEach((b, k) => { if (k) own.push(COMMA); own.push(b); });
      }
    }
    own.push(tail);
    bodies.push(compressJson(Buffer.concat(own)));
    return prefixedPieces(bodies);
  }

  /** fullMapParts is a full map's text before its peers (ending `"Peers":[`), its peers in id order, and the rest. */
  private fullMapParts(node: Node, capVersion: number | undefined): { head: Buffer; peers: Node[]; tail: Buffer } {
    const peers = this.view.peersOf(node.id).map((id) => this.state.nodes.get(id)).filter((n): n is Node => Boolean(n)).sort((a, b) => a.id - b.id);
    const compiled = this.view.forNode(node.id);
    const debug: MapDebug = compiled.randomizeClientPort ? { DisableLogTail: true, RandomizeClientPort: true } : { DisableLogTail: true };
    const members = [
      member('Node', this.selfNode(node, capVersion)),
      member('DERPMap', this.derpMapJson(capVersion)),
      member('Domain', encode(this.domain())),
      member('CollectServices', encode(false)),
      member('Debug', encode(debug)),
      member('DNSConfig', encode(this.dnsConfig(node))),
      member('SSHPolicy', this.sshJson(node.id)),
      member('UserProfiles', this.profilesFor([node, ...peers])),
      member('PacketFilters', encoded<Record<string, WireFilterRule[] | null>>(filterChunksJson(compiled.packetFilter))),
    ];
    // The peers go between head and tail as bytes (fullMapBytes, fullMapMessage).
    const [head, tail] = aroundList(members, 'Peers', [member('ControlTime', encode(new Date().toISOString()))]);
    return { head: Buffer.from(head), peers, tail: Buffer.from(tail) };
  }
}
