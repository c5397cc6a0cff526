import type { HeadwayConfig } from '../config/schema.js';
import { ownedByTags, type Node, type User } from '../domain.js';
import type { State } from '../state/state.js';
import type { DerpMapSource } from './derpmap.js';
import type { DnsConfigSource } from './dns.js';
import { addresses, type NetworkView } from './netview.js';
import { TAGGED_USER_ID } from './wire.js';

export interface OwnerIdentity { id: number; loginName: string; displayName: string }

/**
 * ownerIdentity is who a node belongs to as Tailscale shows it (node User,
 * UserProfiles, the register reply): its user, or the shared tagged-devices identity.
 */
export function ownerIdentity(node: Pick<Node, 'tags' | 'userId'>, user: User | undefined): OwnerIdentity {
  if (ownedByTags(node) || !user) return { id: TAGGED_USER_ID, loginName: 'tagged-devices', displayName: 'Tagged Devices' };
  return { id: user.id, loginName: user.email || user.name, displayName: user.displayName || user.name };
}

/** Capabilities every node receives about itself, whatever the policy says. */
const BASE_SELF_CAPS: Record<string, unknown[]> = {
  'https://tailscale.com/cap/is-admin': [],
  'https://tailscale.com/cap/ssh': [],
  'https://tailscale.com/cap/file-sharing': [],
  // Keeps clients from probing for captive portals on networks they cannot reach.
  'disable-captive-portal-detection': [],
};

/**
 * Mapper turns nodes into the JSON the client reads. Each peer is serialized once
 * per change (cached until the node, its online state or its routes change) and
 * spliced into every recipient's message as text.
 */
export class Mapper {
  private readonly peerJson = new Map<number, string>();

  constructor(
    private readonly state: State,
    private readonly config: HeadwayConfig,
    readonly view: NetworkView,
    private readonly dns: DnsConfigSource,
    private readonly derp: DerpMapSource,
  ) {}

  forget(id: number): void { this.peerJson.delete(id); }
  dnsConfig(): Record<string, unknown> { return this.dns.config(); }
  /** derpMapJson is the DERP map for a client's capability version (older clients cannot pin the relay certificate). */
  derpMapJson(capVersion: number | undefined): string { return this.derp.jsonFor(capVersion); }
  forgetAll(): void { this.peerJson.clear(); }

  fqdn(node: Node): string {
    return this.config.dns.base_domain ? `${node.givenName}.${this.config.dns.base_domain}.` : `${node.givenName}.`;
  }

  private nodeObject(node: Node, self: boolean, capVersion?: number): Record<string, unknown> {
    const addrs = addresses(node);
    const hostinfo = node.hostinfo ?? { Hostname: node.hostname };
    const netinfo = (hostinfo as { NetInfo?: { PreferredDERP?: number } }).NetInfo;
    const online = this.state.isOnline(node.id);
    const o: Record<string, unknown> = {
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
    o.CapMap = self ? { ...BASE_SELF_CAPS, ...compiled.capMap } : { ...compiled.capMap };
    return o;
  }

  /** peer is the cached JSON text of a node as its peers see it. */
  peer(node: Node): string {
    let s = this.peerJson.get(node.id);
    if (s === undefined) {
      s = JSON.stringify(this.nodeObject(node, false));
      this.peerJson.set(node.id, s);
    }
    return s;
  }

  selfNode(node: Node, capVersion?: number): string {
    return JSON.stringify(this.nodeObject(node, true, capVersion));
  }

  private owner(node: Node): OwnerIdentity {
    return ownerIdentity(node, node.userId !== null ? this.state.getUser(node.userId) : undefined);
  }

  profilesFor(nodes: Node[]): string {
    const seen = new Map<number, Record<string, unknown>>();
    for (const n of nodes) {
      const o = this.owner(n);
      seen.set(o.id, { ID: o.id, LoginName: o.loginName, DisplayName: o.displayName });
    }
    return JSON.stringify([...seen.values()]);
  }

  filterJson(id: number): string { return JSON.stringify(this.view.forNode(id).packetFilter); }
  sshJson(id: number): string { return JSON.stringify(this.view.forNode(id).sshPolicy ?? { rules: [] }); }

  /** fullMap is the complete first message of a session (the client requires Node and DERPMap). */
  fullMap(node: Node, capVersion: number | undefined): string {
    const peers = this.view.peersOf(node.id).map((id) => this.state.getNode(id)).filter((n): n is Node => Boolean(n)).sort((a, b) => a.id - b.id);
    const compiled = this.view.forNode(node.id);
    const parts = [
      `"Node":${this.selfNode(node, capVersion)}`,
      `"DERPMap":${this.derp.jsonFor(capVersion)}`,
      `"Domain":${JSON.stringify(this.config.dns.base_domain || 'headway.local')}`,
      `"CollectServices":false`,
      `"Debug":${JSON.stringify(compiled.randomizeClientPort ? { DisableLogTail: true, RandomizeClientPort: true } : { DisableLogTail: true })}`,
      `"DNSConfig":${JSON.stringify(this.dns.config())}`,
      `"SSHPolicy":${this.sshJson(node.id)}`,
      `"UserProfiles":${this.profilesFor([node, ...peers])}`,
      `"PacketFilter":${this.filterJson(node.id)}`,
      `"Peers":[${peers.map((p) => this.peer(p)).join(',')}]`,
      `"ControlTime":${JSON.stringify(new Date().toISOString())}`,
    ];
    return `{${parts.join(',')}}`;
  }
}
