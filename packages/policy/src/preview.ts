import { PolicyError } from './hujson.js';
import { parsePolicy, type Policy } from './policy.js';
import { TailnetContext, primaryRoutes, type FilterRule, type SSHRule, type Snapshot } from './compile.js';
import { runPolicyTests } from './tests.js';
import type { IPSet } from './ip.js';

/** Topology is the `topology` field of a conformance case: users and nodes by name. */
export interface Topology {
  users: { id: number | string; name: string; email?: string }[];
  nodes: Record<string, {
    hostname?: string;
    tags: string[];
    ipv4?: string;
    ipv6?: string;
    user?: string;
    routable_ips?: string[];
    approved_routes?: string[];
  }>;
}

export interface PreviewNodeView {
  Addresses?: string[];
  AllowedIPs: string[];
  PrimaryRoutes?: string[];
  Tags?: string[];
}

export interface PreviewNode {
  packet_filter_rules: FilterRule[];
  ssh_rules: SSHRule[] | null;
  cap_map: Record<string, unknown[] | null>;
  self: PreviewNodeView;
  peers: (PreviewNodeView & { name: string })[];
}

export interface PreviewResult {
  accepted: boolean;
  error?: string;
  nodes: Record<string, PreviewNode>;
}

/** topologySnapshot converts a conformance topology into a compiler snapshot. Node ids are
 * assigned in the topology's order so "first registered" means first listed. */
export function topologySnapshot(t: Topology, opts: PreviewOptions = {}): Snapshot {
  const users = t.users.map((u) => ({ id: String(u.id), name: u.name, ...(u.email ? { email: u.email } : {}) }));
  const nodes = Object.entries(t.nodes).map(([name, n], idx) => {
    const user = n.user === undefined ? undefined : users.find((u) => u.name === n.user);
    return {
      id: String(idx + 1), name, tags: n.tags ?? [],
      ...(n.tags.length === 0 && user ? { userId: user.id } : {}),
      ...(n.ipv4 ? { ipv4: n.ipv4 } : {}), ...(n.ipv6 ? { ipv6: n.ipv6 } : {}),
      availableRoutes: n.routable_ips ?? [], approvedRoutes: n.approved_routes ?? [],
    };
  });
  const order = opts.registrationOrder ?? [];
  const rank = (name: string) => (order.includes(name) ? order.indexOf(name) : order.length);
  nodes.sort((a, b) => rank(a.name) - rank(b.name));
  return { users, nodes };
}

/** PreviewOptions: registrationOrder lists node names earliest-registered first. The
 * topology does not record it, yet it decides which of several routers advertising the
 * same subnet is primary (the earliest one); unlisted nodes keep topology order after. */
export interface PreviewOptions {
  registrationOrder?: string[];
}

/** tailnetDomainsOf guesses the tailnet's own e-mail domain: the first (owner) user's. */
export function tailnetDomainsOf(s: Snapshot): string[] {
  const email = s.users[0]?.email;
  return email && email.includes('@') ? [email.slice(email.lastIndexOf('@') + 1)] : [];
}

/** previewPolicy parses, checks and compiles a policy over a topology, producing exactly
 * the per-node view the hosted control plane would send (the conformance `nodes` shape). */
export function previewPolicy(text: string, topology: Topology, opts: PreviewOptions = {}): PreviewResult {
  const snapshot = topologySnapshot(topology, opts);
  let policy: Policy;
  try {
    policy = parsePolicy(text, { tailnetDomains: tailnetDomainsOf(snapshot) });
    runPolicyTests(policy, snapshot);
  } catch (e) {
    if (e instanceof PolicyError) return { accepted: false, error: e.reason, nodes: {} };
    throw e;
  }
  return { accepted: true, nodes: previewNodes(policy, snapshot) };
}

/** previewNodes renders every node's compiled view for an accepted policy (or null = allow all). */
export function previewNodes(policy: Policy | null, snapshot: Snapshot): Record<string, PreviewNode> {
  const ctx = new TailnetContext(policy, snapshot);
  const primary = primaryRoutes(ctx);
  const cache = new Map<string, { srcs: IPSet; dsts: IPSet }[]>();
  let selfId = '';
  let viewer: ReturnType<typeof ctx.info> | null = null;
  const view = (id: string): PreviewNodeView => {
    const i = ctx.info(id);
    // The disable-ipv4 attribute withdraws the node's IPv4 address from the tailnet.
    const v4Off = 'disable-ipv4' in ctx.capMap(i) || (viewer !== null && 'disable-ipv4' in ctx.capMap(viewer));
    const addrs = i.ips.prefixes().filter((p) => !v4Off || p.includes(':')).map((p) => (p.includes('/') ? p : p.includes(':') ? `${p}/128` : `${p}/32`));
    const visible = (r: string) => !viewer || ctx.routeVisible(viewer, i, r, cache);
    // A via grant picks the router for its sources: for them the first matching via
    // router serves the route, whatever the tailnet-wide primary is.
    const servedFor = (r: string) => {
      if (!viewer) return primary.get(r) === id;
      const v = viewer;
      if (ctx.routeVisible(v, i, r, cache, false)) return primary.get(r) === id;
      const viaRouter = ctx.infos.find((j) => j.subnetRoutes.includes(r) && ctx.viaServes(v, j, r));
      if (viaRouter) return viaRouter.node.id === id;
      return primary.get(r) === id && visible(r);
    };
    const prim = i.subnetRoutes.filter(servedFor);
    const v: PreviewNodeView = { AllowedIPs: [...addrs, ...prim, ...i.exitRoutes.filter(visible)] };
    if (id === selfId) v.AllowedIPs = [...addrs, ...i.subnetRoutes, ...i.exitRoutes];
    if (prim.length > 0) v.PrimaryRoutes = prim;
    if (i.node.tags.length > 0) v.Tags = [...i.node.tags].sort();
    return v;
  };
  const out: Record<string, PreviewNode> = {};
  for (const i of ctx.infos) {
    selfId = i.node.id;
    const self = view(i.node.id);
    selfId = '';
    viewer = i;
    self.Addresses = i.ips.prefixes().filter((p) => !('disable-ipv4' in ctx.capMap(i)) || p.includes(':')).map((p) => (p.includes('/') ? p : p.includes(':') ? `${p}/128` : `${p}/32`));
    out[i.node.name] = {
      packet_filter_rules: ctx.packetFilter(i),
      ssh_rules: ctx.sshRules(i) ?? [],
      cap_map: ctx.capMap(i),
      self,
      peers: ctx.peers(i, cache).map((p) => ({ name: p.node.name, ...view(p.node.id) })),
    };
    viewer = null;
  }
  return out;
}
