// A small fleet driven at the State, the SessionHub and the NetworkView, with a
// model of what each client holds after applying every message it was sent.
import { DerpMapSource, DnsConfigSource, Mapper } from '../src/index.js';
import { Metrics, NetworkView, silentLogger, type Node } from '@headway/core';
import { parsePolicy, type Policy } from '@headway/policy';
import { SessionHub, type HubOptions } from '../src/sessions.js';
import { keepAliveWait, MapSession } from '../src/map-session.js';
import { setSharedFrameMin, wireBytes } from '../src/frames.js';
import { applyPacketFilters, concatPacketFilters, zstdDecompress, type FilterRule, type MapResponse } from '@headway/testkit';
import { machineKey, nodeKey, startState, type Rng, type TestState } from '@headway/test-support';

type Json = Record<string, unknown>;

/** ClientModel applies MapResponses the way tailscaled's netmap does: upserts, removals, patches. */
export class ClientModel {
  self: Json | undefined;
  peers = new Map<number, Json>();
  /** filter is every named filter list concatenated in name order, as tailscaled evaluates them. */
  filter: FilterRule[] = [];
  /** filters are the named lists (PacketFilter is the one named "base"). */
  filters = new Map<string, FilterRule[]>();
  ssh: unknown;
  profiles = new Map<number, Json>();
  messages = 0;
  bytes = 0;
  loggedOut = false;
  /** last is the last message the client was sent. */
  last: Json | undefined;
  /** problems are messages a client would find odd (a patch for a peer it does not hold). */
  problems: string[] = [];

  /** zstd: the client asked for compressed messages (a body may hold several frames, see frameSegments). */
  constructor(readonly zstd = false) {}

  apply(buf: Buffer): void {
    const len = buf.readUInt32LE(0);
    const body = buf.subarray(4, 4 + len);
    const text = (this.zstd ? zstdDecompress(body) : body).toString();
    this.messages++;
    this.bytes += buf.length;
    const m = JSON.parse(text) as Json;
    this.last = m;
    if (m.KeepAlive) return;
    if (m.Node) {
      this.self = m.Node as Json;
      if ((m.Node as Json).KeyExpiry === '1970-01-01T00:02:03Z') this.loggedOut = true;
    }
    if (m.Peers) this.peers = new Map((m.Peers as Json[]).map((p) => [p.ID as number, p]));
    for (const p of (m.PeersChanged as Json[] | undefined) ?? []) this.peers.set(p.ID as number, p);
    for (const id of (m.PeersRemoved as number[] | undefined) ?? []) {
      if (!this.peers.delete(id)) this.problems.push(`PeersRemoved names ${id}, which the client does not hold`);
    }
    for (const pc of (m.PeersChangedPatch as Json[] | undefined) ?? []) {
      const p = this.peers.get(pc.NodeID as number);
      if (!p) { this.problems.push(`PeersChangedPatch for ${String(pc.NodeID)}, which the client does not hold`); continue; }
      const next = { ...p };
      if (pc.Online !== undefined) next.Online = pc.Online;
      if (pc.LastSeen !== undefined) next.LastSeen = pc.LastSeen;
      if (pc.Endpoints !== undefined) next.Endpoints = pc.Endpoints;
      if (pc.DERPRegion !== undefined) next.HomeDERP = pc.DERPRegion;
      if (pc.KeyExpiry !== undefined) next.KeyExpiry = pc.KeyExpiry;
      if (pc.DiscoKey !== undefined) next.DiscoKey = pc.DiscoKey;
      if (pc.Key !== undefined) next.Key = pc.Key;
      this.peers.set(pc.NodeID as number, next);
    }
    if (applyPacketFilters(this.filters, m as Pick<MapResponse, 'PacketFilter' | 'PacketFilters'>)) this.filter = concatPacketFilters(this.filters);
    if (m.SSHPolicy !== undefined) this.ssh = m.SSHPolicy;
    for (const u of (m.UserProfiles as Json[] | undefined) ?? []) this.profiles.set(u.ID as number, u);
  }
}

/**
 * expandRules is a filter as the set of (one source entry, the rest of the rule) pairs it allows, sorted: cutting a
 * rule's sources into chunks, or chunks into rules, leaves it unchanged.
 */
export function expandRules(rules: readonly unknown[]): string[] {
  const out: string[] = [];
  for (const r of rules as Array<Record<string, unknown>>) {
    const { SrcIPs, ...rest } = r;
    const head = JSON.stringify(Object.fromEntries(Object.entries(rest).sort(([a], [b]) => (a < b ? -1 : 1))));
    for (const src of (SrcIPs as string[] | undefined) ?? []) out.push(`${src} ${head}`);
  }
  return out.sort();
}

/** PEER_FIELDS are what a client acts on; Created, LastSeen, Expired and ControlTime are left out (clock-dependent). */
const PEER_FIELDS = ['ID', 'Key', 'Machine', 'DiscoKey', 'Name', 'User', 'Addresses', 'AllowedIPs', 'PrimaryRoutes', 'Tags',
  'Online', 'KeyExpiry', 'Endpoints', 'Hostinfo', 'CapMap', 'HomeDERP'] as const;

const ZERO_TIME = '0001-01-01T00:00:00Z';

export function essentials(n: Json): Json {
  const out: Json = {};
  for (const f of PEER_FIELDS) {
    let v = n[f];
    if (f === 'KeyExpiry' && v === ZERO_TIME) v = undefined;
    if (v !== undefined) out[f] = v;
  }
  return out;
}

export const USERS = [
  { name: 'alice', email: 'alice@example.com' },
  { name: 'bob', email: 'bob@example.com' },
  { name: 'carol', email: '' },
];
export const TAGS = ['tag:web', 'tag:db'];
export const ROUTES = ['10.1.0.0/24', '10.2.0.0/24', '0.0.0.0/0', '::/0'];

/** compiled parses a test policy as PolicyService would hand it on (undefined: no policy). */
export function compiled(text: string | undefined): Policy | null {
  return text === undefined ? null : parsePolicy(text);
}

/** POLICIES are the policies a random run switches between (undefined: no policy, everything allowed). */
export const POLICIES: Array<string | undefined> = [
  undefined,
  '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}',
  `{
    "tagOwners": {"tag:web": ["alice@example.com"], "tag:db": ["alice@example.com"]},
    "acls": [
      {"action": "accept", "src": ["alice@example.com"], "dst": ["tag:web:*", "autogroup:internet:*"]},
      {"action": "accept", "src": ["tag:web"], "dst": ["tag:db:5432", "10.1.0.0/24:*"]},
    ],
    "autoApprovers": {"routes": {"10.1.0.0/24": ["tag:web"], "10.2.0.0/24": ["bob@example.com"]}, "exitNode": ["tag:db"]},
  }`,
  `{
    "groups": {"group:ops": ["bob@example.com", "alice@example.com"]},
    "acls": [
      {"action": "accept", "src": ["group:ops"], "dst": ["bob@example.com:22", "10.2.0.0/24:*"]},
      {"action": "accept", "src": ["autogroup:member"], "dst": ["autogroup:self:*"]},
    ],
    "ssh": [{"action": "accept", "src": ["group:ops"], "dst": ["autogroup:self"], "users": ["root"]}],
  }`,
  // Changes what peers look like, not only who sees whom: nodeAttrs put capabilities in a peer's CapMap and the
  // exit-node approvers change a peer's AllowedIPs (a policy change must resend exactly those peers).
  `{
    "tagOwners": {"tag:web": ["alice@example.com"], "tag:db": ["alice@example.com"]},
    "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}],
    "nodeAttrs": [{"target": ["tag:web"], "attr": ["funnel"]}, {"target": ["bob@example.com"], "attr": ["mullvad"]}],
    "autoApprovers": {"routes": {"10.1.0.0/24": ["alice@example.com"]}, "exitNode": ["tag:web", "bob@example.com"]},
  }`,
];

interface Connected { session: MapSession; client: ClientModel }

/**
 * Fleet wires State, NetworkView, Mapper and SessionHub as ControlServer does,
 * with in-memory map sessions whose frames feed a ClientModel.
 */
export class Fleet {
  policyText: string | undefined;
  view!: NetworkView;
  mapper!: Mapper;
  hub!: SessionHub;
  dns!: DnsConfigSource;
  derp!: DerpMapSource;
  readonly connected = new Map<number, Connected>();
  /** retired are clients of deleted nodes: they must have been told they are logged out. */
  readonly retired: ClientModel[] = [];
  log: string[] = [];

  constructor(readonly s: TestState) {}

  /** start wires a fleet; options put in the hub's clock and load meter (tests on a FakeClock). */
  static async start(t: { teardown(fn: () => void | Promise<void>): void }, policy?: string, options: HubOptions = {}): Promise<Fleet> {
    const s = await startState(t);
    const f = new Fleet(s);
    // Shared parts from a few dozen bytes go out as frames of their own (one peer's entry is about 600, a block of
    // a small fleet's sources one to a few hundred), so the zstd sessions' messages are mostly several frames.
    // A full map's peer blocks too (Mapper.fullMapMessage): a zstd session's full map is several frames.
    const wasFrameMin = setSharedFrameMin(64);
    t.teardown(() => { setSharedFrameMin(wasFrameMin); });
    f.policyText = policy;
    const { state, config } = s;
    f.view = new NetworkView(state, silentLogger);
    f.dns = new DnsConfigSource(config.dns, [config.prefixes.v4, config.prefixes.v6].filter(Boolean), silentLogger, () => undefined);
    f.derp = new DerpMapSource(config, silentLogger, () => undefined);
    f.mapper = new Mapper(state, config, f.view, f.dns, f.derp);
    f.hub = new SessionHub(state, f.mapper, silentLogger, new Metrics(state), () => compiled(f.policyText), options);
    f.hub.closeNode = (id) => {
      const c = f.connected.get(id);
      if (!c) return;
      f.hub.close(c.session);
      f.connected.delete(id);
      f.retired.push(c.client);
    };
    f.hub.start();
    t.teardown(() => f.hub.stop());
    for (const u of USERS) await state.users.create(u);
    return f;
  }

  get state() { return this.s.state; }
  users() { return this.state.users.list(); }

  /**
   * connect opens a streaming map session the way ControlServer.map does: its full map goes out at once, or
   * with the pending batch when one is waiting (SessionHub.begin).
   */
  connect(id: number): void {
    const { state } = this;
    // Every other node asks for zstd, as real clients do: their messages may hold several frames.
    const zstd = id % 2 === 0;
    const client = new ClientModel(zstd);
    const session = new MapSession(id, 106, zstd, (msg) => client.apply(wireBytes(msg)), () => undefined, keepAliveWait(), this.hub.clock);
    state.presence.sessionOpened(id);
    this.hub.begin(session, state.nodes.require(id), (node) => client.apply(wireBytes(this.mapper.fullMapMessage(node, 106, zstd))));
    this.connected.set(id, { session, client });
  }

  async disconnect(id: number): Promise<void> {
    const c = this.connected.get(id)!;
    this.hub.close(c.session);
    this.connected.delete(id);
    await this.state.presence.sessionClosed(id);
  }

  /** step performs one random operation and returns its description. */
  async step(rng: Rng): Promise<string> {
    const { state } = this;
    const nodes = state.nodes.list();
    const any = (): Node => rng.pick(nodes);
    const roll = rng.int(nodes.length < 3 ? 4 : 15);
    if (roll <= 2 || nodes.length === 0) {
      if (nodes.length >= 7) return this.step(rng);
      const tags = rng.chance(0.3) ? rng.subset(TAGS) : [];
      const user = tags.length && rng.chance(0.5) ? null : rng.pick(this.users()).id;
      const n = await state.nodes.create({
        machineKey: machineKey(), nodeKey: nodeKey(), hostname: rng.pick(['web', 'db', 'laptop']), userId: user,
        tags: user === null && !tags.length ? ['tag:web'] : tags, availableRoutes: rng.subset(ROUTES), registerMethod: 'authkey',
      });
      if (rng.chance(0.7)) this.connect(n.id);
      return `join ${n.id} user=${n.userId} tags=${n.tags} routes=${n.availableRoutes}`;
    }
    const n = any();
    switch (roll) {
      case 3: await state.nodes.delete(n.id); return `delete ${n.id}`;
      case 4: {
        const tags = rng.subset(TAGS);
        if (tags.length) { await state.nodes.setTags(n.id, tags); return `tags ${n.id} ${tags}`; }
        // Untagging is a user's re-login (Registrar.approve): the node becomes that user's.
        const u = rng.pick(this.users()).id;
        await state.nodes.update(n.id, { tags: [], userId: u });
        return `untag ${n.id} to user ${u}`;
      }
      case 5: { const r = rng.subset(ROUTES); await state.nodes.approveRoutes(n.id, r); return `approve ${n.id} ${r}`; }
      case 6: { const r = rng.subset(ROUTES); await state.nodes.update(n.id, { availableRoutes: r }); return `advertise ${n.id} ${r}`; }
      case 7: {
        const p = rng.int(POLICIES.length);
        this.policyText = POLICIES[p];
        state.bus.publish({ type: 'policy-changed' });
        return `policy ${p}`;
      }
      case 8: case 9:
        if (this.connected.has(n.id)) { await this.disconnect(n.id); return `disconnect ${n.id}`; }
        this.connect(n.id);
        return `connect ${n.id}`;
      case 10: {
        const u = rng.pick(this.users());
        const name = u.name.replace(/\d+$/, '') + (rng.int(9) + 1);
        await state.users.rename(u.id, name);
        return `rename user ${u.id} ${name}`;
      }
      case 11: { const name = `n${n.id}-${rng.int(100)}`; await state.nodes.rename(n.id, name); return `rename node ${n.id} ${name}`; }
      case 12: { const at = new Date(Date.now() + (rng.chance(0.5) ? -1 : 1) * 3600_000); await state.nodes.expire(n.id, at); return `expire ${n.id}`; }
      case 13: { const ep = [`192.0.2.${rng.int(200) + 1}:41641`]; await state.nodes.update(n.id, { endpoints: ep }, 'silent'); state.nodes.publishPatch(n.id, { endpoints: ep }); return `endpoints ${n.id}`; }
      default: {
        const u = rng.pick(this.users());
        if (n.tags.length === 0 && n.userId === u.id) return `noop ${n.id}`;
        await state.nodes.update(n.id, { userId: u.id }); return `owner ${n.id} -> ${u.id}`;
      }
    }
  }
}
