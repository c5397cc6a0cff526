// compile-reference is the SLOW REFERENCE compiler: the policy compiler without the per-context indexes, kept
// only so the property test (compile-fast.test.ts) can check that the indexed compiler gives exactly the same
// result for every node. O(N·R) per node; never use it elsewhere. Names are prefixed with Reference so nobody
// imports it by mistake. A change to what the compiler produces (e.g. SSH principals: one per address) is made
// here too, so that the two still agree.
import { ALL, INTERNET, IPSet, TAILNET_WILDCARD, isExitRoute, parseAddr, parsePrefix, parseRangeText, type Addr } from '../src/ip.js';
import type { Alias, Grant, Policy, PortRange, ProtoPorts } from '../src/policy.js';
// The data shapes are the real ones: only the algorithm differs (a scan of every rule for every node).
import { ALLOW_ALL, CHECK_HOLD_URL, type CapGrant, type CompiledNode, type FilterRule, type NetPortRange, type PolicyUser, type Snapshot, type SSHAction, type SSHPrincipal, type SSHRule, type PolicyNode } from '../src/compile.js';

const CAP_DRIVE = 'tailscale.com/cap/drive';
const CAP_DRIVE_SHARER = 'tailscale.com/cap/drive-sharer';
const CAP_RELAY = 'tailscale.com/cap/relay';
const CAP_RELAY_TARGET = 'tailscale.com/cap/relay-target';
const COMPANIONS: [string, string][] = [[CAP_DRIVE, CAP_DRIVE_SHARER], [CAP_RELAY, CAP_RELAY_TARGET]];

interface NodeInfo {
  node: PolicyNode;
  addrs: Addr[];
  ips: IPSet;
  tagged: boolean;
  approved: string[];
  subnetRoutes: string[];
  subnetSet: IPSet;
  exitRoutes: string[];
}

interface CompiledGrant {
  rules: FilterRule[];
  self: { srcs: IPSet[]; ip: ProtoPorts[]; app: Record<string, unknown[]> | null } | null;
  via: { tags: string[]; dsts: IPSet[]; internet: boolean; ip: ProtoPorts[]; srcIPs: string[]; srcSet: IPSet } | null;
}

/** TailnetContext resolves a policy against one snapshot; build it once per snapshot. */
export class ReferenceTailnetContext {
  readonly infos: NodeInfo[];
  readonly byId = new Map<string, NodeInfo>();
  private readonly grants: CompiledGrant[] | null;

  /** applyAutoApprovers=false takes approvedRoutes as final (e.g. a capture of a control
   * plane that already applied autoApprovers when the routes were advertised). */
  constructor(readonly policy: Policy | null, readonly snapshot: Snapshot, readonly applyAutoApprovers = true) {
    const base = snapshot.nodes.map((n) => {
      const addrs = [n.ipv4, n.ipv6].filter((x): x is string => !!x).map((s) => {
        const a = parseAddr(s);
        if (!a) throw new Error(`node ${n.name}: invalid address ${JSON.stringify(s)}`);
        return a;
      });
      const ips = IPSet.of(...[n.ipv4, n.ipv6].filter((x): x is string => !!x));
      return { node: n, addrs, ips, tagged: n.tags.length > 0 };
    });
    this.infos = base.map((b) => ({ ...b, approved: [], subnetRoutes: [], subnetSet: new IPSet(), exitRoutes: [] }));
    for (const i of this.infos) this.byId.set(i.node.id, i);
    for (const i of this.infos) {
      i.approved = this.effectiveApproved(i);
      i.subnetRoutes = i.node.availableRoutes.filter((r) => !isExitRoute(r) && i.approved.includes(r));
      i.subnetSet = IPSet.of(...i.subnetRoutes);
      i.exitRoutes = i.node.availableRoutes.filter((r) => isExitRoute(r) && i.approved.includes(r));
    }
    // A policy without acls or grants behaves like Tailscale's default `*` -> `*:*` rule,
    // whose sources are the tailnet ranges (not a literal "*").
    const effective = policy && policy.acls === null && policy.grants === null
      ? { ...policy, grants: [{ src: [{ kind: 'wildcard' as const }], dst: [{ kind: 'wildcard' as const }], ip: [{ protos: null, ports: [{ First: 0, Last: 65535 }] }], app: null, via: [] }] }
      : policy;
    this.grants = effective ? this.compileGrants(effective) : null;
  }

  private userOf(alias: string): PolicyUser | undefined {
    const trimmed = alias.endsWith('@') ? alias.slice(0, -1) : alias;
    const matches = this.snapshot.users.filter((u) => u.email === trimmed || u.name === trimmed);
    return matches.length === 1 ? matches[0] : undefined;
  }

  private nodesOfUser(u: PolicyUser | undefined): NodeInfo[] {
    if (!u) return [];
    return this.infos.filter((i) => !i.tagged && i.node.userId === u.id);
  }

  /** resolve turns an alias into addresses; null for autogroup:self (resolved per node). */
  resolve(a: Alias): IPSet | null {
    const pol = this.policy;
    const union = (infos: NodeInfo[]) => infos.reduce((s, i) => s.union(i.ips), new IPSet());
    switch (a.kind) {
      case 'wildcard': return TAILNET_WILDCARD;
      case 'user': return union(this.nodesOfUser(this.userOf(a.name)));
      case 'userDomain':
        return union(this.infos.filter((i) => {
          const u = this.snapshot.users.find((x) => x.id === i.node.userId);
          return !i.tagged && !!u?.email && u.email.toLowerCase().endsWith('@' + a.domain.toLowerCase());
        }));
      case 'group': {
        const bare = a.name.slice('group:'.length);
        const fromProvider = this.snapshot.users.filter((u) => u.groups?.includes(bare));
        return union([...(pol?.groups[a.name] ?? []).map((m) => this.userOf(m)), ...fromProvider].flatMap((u) => this.nodesOfUser(u)));
      }
      case 'tag': return union(this.infos.filter((i) => i.node.tags.includes(a.name)));
      case 'host': return pol?.hosts[a.name] ?? new IPSet();
      case 'prefix': return a.set;
      case 'autogroup':
        switch (a.name) {
          case 'autogroup:internet': return INTERNET;
          case 'autogroup:member': return union(this.infos.filter((i) => !i.tagged));
          case 'autogroup:tagged': return union(this.infos.filter((i) => i.tagged));
          case 'autogroup:danger-all': return ALL;
          default: return null;
        }
    }
  }

  private resolveAll(aliases: Alias[]): IPSet {
    return aliases.reduce((s, a) => s.union(this.resolve(a) ?? new IPSet()), new IPSet());
  }

  /** effectiveApproved is approved ∪ routes the autoApprovers approve for this node. */
  private effectiveApproved(i: NodeInfo): string[] {
    const out = new Set(i.node.approvedRoutes);
    const aa = this.policy?.autoApprovers;
    if (aa && this.applyAutoApprovers) {
      for (const route of i.node.availableRoutes) {
        const r = parsePrefix(route);
        if (!r) continue;
        if (isExitRoute(route)) {
          if (aa.exitNode.some((a) => this.approverIncludes(a, i))) out.add(route);
          continue;
        }
        for (const [key, approvers] of Object.entries(aa.routes)) {
          const k = parsePrefix(key);
          if (!k || k.v6 !== r.v6 || k.start > r.start || k.end < r.end) continue;
          if (approvers.some((a) => this.approverIncludes(a, i))) out.add(route);
        }
      }
    }
    return [...out];
  }

  private approverIncludes(a: Alias, i: NodeInfo): boolean {
    const set = this.resolve(a);
    return !!set && i.addrs.some((x) => set.containsAddr(x));
  }

  private approvedSubnetRouteStrings(): string[] {
    return [...new Set(this.infos.flatMap((i) => i.subnetRoutes))];
  }

  private srcStrings(srcAliases: Alias[], resolved: IPSet): string[] {
    if (srcAliases.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:danger-all')) return ['*'];
    if (resolved.isEmpty()) return [];
    const out = resolved.strings();
    if (srcAliases.some((a) => a.kind === 'wildcard')) {
      // "*" also covers every approved subnet route, listed route by route.
      for (const r of this.approvedSubnetRouteStrings()) if (!out.includes(r)) out.push(r);
      for (const a of srcAliases) {
        if (a.kind === 'wildcard') continue;
        for (const s of (this.resolve(a) ?? new IPSet()).strings()) if (!out.includes(s)) out.push(s);
      }
    }
    return out;
  }

  private compileGrants(pol: Policy): CompiledGrant[] {
    const grants: Grant[] = [...(pol.grants ?? [])];
    for (const acl of pol.acls ?? []) {
      const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
      const ordered = [...acl.dst.filter((d) => !isSelf(d.alias)), ...acl.dst.filter((d) => isSelf(d.alias))];
      for (const d of ordered) {
        grants.push({ src: acl.src, dst: [d.alias], ip: [{ protos: acl.proto, ports: d.ports }], app: null, via: [] });
      }
    }
    return grants.map((g) => this.compileGrant(g)).filter((g): g is CompiledGrant => g !== null);
  }

  private compileGrant(g: Grant): CompiledGrant | null {
    if (g.src.length === 0 || g.dst.length === 0) return null;
    const srcSets = g.src.map((a) => this.resolve(a) ?? new IPSet());
    const srcUnion = srcSets.reduce((s, x) => s.union(x), new IPSet());
    const srcIPs = this.srcStrings(g.src, srcUnion);
    if (g.via.length > 0) {
      if (srcUnion.isEmpty()) return null;
      const internet = g.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:internet');
      const dsts = g.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:internet'))
        .map((a) => this.resolve(a)).filter((s): s is IPSet => !!s);
      return { rules: [], self: null, via: { tags: g.via, dsts, internet, ip: g.ip, srcIPs, srcSet: srcUnion } };
    }
    const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
    const other = g.dst.filter((a) => !isSelf(a));
    const rules: FilterRule[] = [];
    if (other.length > 0) {
      for (const pp of g.ip) {
        const dstPorts: NetPortRange[] = [];
        for (const d of other) {
          if (d.kind === 'wildcard') {
            for (const p of pp.ports) dstPorts.push({ IP: '*', Ports: p });
            continue;
          }
          const set = this.resolve(d);
          if (!set) continue;
          for (const pref of set.prefixes()) for (const p of pp.ports) dstPorts.push({ IP: pref, Ports: p });
        }
        if (dstPorts.length > 0 && srcIPs.length > 0) rules.push(withProto({ SrcIPs: srcIPs, DstPorts: dstPorts }, pp.protos));
      }
      if (g.app) {
        const capGrants: CapGrant[] = [];
        const dstIPs: string[] = [];
        for (const d of other) {
          const set = this.resolve(d);
          if (!set) continue;
          capGrants.push({ Dsts: prefixesWithBits(set), CapMap: g.app });
          dstIPs.push(...set.strings());
        }
        if (capGrants.length > 0) {
          rules.push({ SrcIPs: srcIPs, CapGrant: capGrants });
          if (other.some((a) => a.kind === 'wildcard')) dstIPs.push(...this.approvedSubnetRouteStrings());
          rules.push(...companionRules(dstIPs, prefixesWithBits(srcUnion), g.app));
        }
      }
    }
    const self = g.dst.some(isSelf) ? { srcs: srcSets, ip: g.ip, app: g.app } : null;
    return { rules, self, via: null };
  }

  /** unreducedRules is every rule relevant to compiling this node's filter, before
   * dropping destinations the node does not serve. */
  unreducedRules(i: NodeInfo): FilterRule[] {
    if (!this.grants) return ALLOW_ALL;
    const rules: FilterRule[] = [];
    for (const g of this.grants) {
      rules.push(...g.rules);
      if (g.self) rules.push(...this.selfRules(g.self, i));
      if (g.via) rules.push(...this.viaRules(g.via, i));
    }
    return mergeRules(rules);
  }

  private selfRules(s: NonNullable<CompiledGrant['self']>, i: NodeInfo): FilterRule[] {
    if (i.tagged || !i.node.userId) return [];
    const same = this.infos.filter((x) => !x.tagged && x.node.userId === i.node.userId);
    let src = new IPSet();
    for (const set of s.srcs) for (const n of same) if (n.addrs.some((a) => set.containsAddr(a))) src = src.union(n.ips);
    if (src.isEmpty()) return [];
    const rules: FilterRule[] = [];
    for (const pp of s.ip) {
      const dstPorts: NetPortRange[] = [];
      for (const n of same) for (const p of pp.ports) for (const ip of n.ips.strings()) dstPorts.push({ IP: ip, Ports: p });
      if (dstPorts.length > 0) rules.push(withProto({ SrcIPs: src.strings(), DstPorts: dstPorts }, pp.protos));
    }
    if (s.app) {
      const caps = same.map((n) => ({ Dsts: prefixesWithBits(n.ips), CapMap: s.app! }));
      rules.push({ SrcIPs: src.strings(), CapGrant: caps });
      rules.push(...companionRules(same.flatMap((n) => n.ips.strings()), prefixesWithBits(src), s.app));
    }
    return rules;
  }

  private viaRules(v: NonNullable<CompiledGrant['via']>, i: NodeInfo): FilterRule[] {
    if (!v.tags.some((t) => i.node.tags.includes(t))) return [];
    const prefixes: string[] = [];
    for (const d of v.dsts) if (i.subnetSet.overlaps(d)) prefixes.push(...prefixesWithBits(d));
    if (v.internet && i.exitRoutes.length > 0) prefixes.push(...prefixesWithBits(INTERNET));
    if (prefixes.length === 0) return [];
    return v.ip.map((pp) => withProto({
      SrcIPs: v.srcIPs,
      DstPorts: prefixes.flatMap((p) => pp.ports.map((port) => ({ IP: p, Ports: port }))),
    }, pp.protos));
  }

  /** packetFilter is the node's filter: only destinations the node itself serves. */
  packetFilter(i: NodeInfo): FilterRule[] {
    const rules = this.unreducedRules(i);
    if (!this.grants) return rules;
    const out: FilterRule[] = [];
    for (const r of rules) {
      if (r.CapGrant) {
        const caps: CapGrant[] = [];
        for (const cg of r.CapGrant) {
          const dsts = new Set<string>();
          for (const d of cg.Dsts) {
            const set = IPSet.of(d);
            for (const a of i.addrs) if (set.containsAddr(a)) dsts.add(addrText(a) + (a.v6 ? '/128' : '/32'));
            if (set.overlaps(i.subnetSet)) dsts.add(d);
          }
          if (dsts.size > 0) caps.push({ Dsts: [...dsts].sort(), CapMap: cg.CapMap });
        }
        if (caps.length > 0) out.push({ SrcIPs: r.SrcIPs, CapGrant: caps });
        continue;
      }
      const dsts = (r.DstPorts ?? []).filter((d) => {
        const set = d.IP === '*' ? ALL : IPSet.of(d.IP);
        if (i.addrs.some((a) => set.containsAddr(a))) return true;
        if (set.overlaps(i.subnetSet)) return true;
        return i.exitRoutes.length > 0 && set.subsetOf(INTERNET);
      });
      if (dsts.length > 0) out.push({ ...r, DstPorts: dsts });
    }
    return out;
  }

  private matchers(i: NodeInfo): { srcs: IPSet; dsts: IPSet }[] {
    return this.unreducedRules(i).map((r) => ({
      srcs: r.SrcIPs.reduce((s, x) => s.union(x === '*' ? ALL : IPSet.of(x)), new IPSet()),
      dsts: [...(r.DstPorts ?? []).map((d) => (d.IP === '*' ? ALL : IPSet.of(d.IP))),
        ...(r.CapGrant ?? []).flatMap((c) => c.Dsts.map((d) => IPSet.of(d)))].reduce((s, x) => s.union(x), new IPSet()),
    }));
  }

  /** viaServes reports whether a via grant lets `user` reach something through `router`. */
  viaServes(user: NodeInfo, router: NodeInfo, prefix?: string): boolean {
    for (const g of this.grants ?? []) {
      const v = g.via;
      if (!v || !v.tags.some((t) => router.node.tags.includes(t))) continue;
      if (!user.addrs.some((a) => v.srcSet.containsAddr(a))) continue;
      const routes = prefix ? IPSet.of(prefix) : router.subnetSet;
      if (prefix && isExitRoute(prefix)) { if (v.internet) return true; continue; }
      if (v.dsts.some((d) => d.overlaps(routes))) return true;
      if (!prefix && v.internet && router.exitRoutes.length > 0) return true;
    }
    return false;
  }

  /** peers are the nodes `i` can reach or be reached by, judged by either side's rules. */
  peers(i: NodeInfo, cache: Map<string, { srcs: IPSet; dsts: IPSet }[]>): NodeInfo[] {
    const m = (n: NodeInfo) => {
      let v = cache.get(n.node.id);
      if (!v) { v = this.matchers(n); cache.set(n.node.id, v); }
      return v;
    };
    return this.infos.filter((j) => j !== i && (
      canAccess(i, j, m(i)) || canAccess(j, i, m(j)) || canAccess(j, i, m(i)) || canAccess(i, j, m(j)) ||
      this.viaServes(i, j) || this.viaServes(j, i)));
  }

  /** routeVisible reports whether `viewer` gets route `prefix` of `router` in AllowedIPs:
   * either some rule lets the viewer send into the route, or the viewer's own filter
   * accepts packets from the route (so replies and inbound traffic must be routed). */
  routeVisible(viewer: NodeInfo, router: NodeInfo, prefix: string, cache: Map<string, { srcs: IPSet; dsts: IPSet }[]>, includeVia = true): boolean {
    const m = (n: NodeInfo) => {
      let v = cache.get(n.node.id);
      if (!v) { v = this.matchers(n); cache.set(n.node.id, v); }
      return v;
    };
    const route = IPSet.of(prefix);
    const exit = isExitRoute(prefix);
    const reaches = (dsts: IPSet) => (exit ? dsts.overlaps(INTERNET) : dsts.overlaps(route));
    // A standby router for the same prefix always knows the primary's route.
    if (viewer.subnetRoutes.includes(prefix)) return true;
    if (includeVia && this.viaServes(viewer, router, prefix)) return true;
    if ([...m(viewer), ...(includeVia ? m(router) : [])].some((x) => (viewer.addrs.some((a) => x.srcs.containsAddr(a)) || x.srcs.overlaps(viewer.subnetSet)) && reaches(x.dsts))) return true;
    if (exit) return false;
    let inbound = this.inboundCache.get(viewer.node.id);
    if (!inbound) {
      inbound = this.packetFilter(viewer).reduce((s, r) => s.union(r.SrcIPs.reduce((t, x) => t.union(x === '*' ? ALL : IPSet.of(x)), new IPSet())), new IPSet());
      this.inboundCache.set(viewer.node.id, inbound);
    }
    return inbound.overlaps(route);
  }

  private readonly inboundCache = new Map<string, IPSet>();

  /**
   * matcherCache holds every node's parsed rule matchers for this snapshot, shared by all compilePolicy calls on
   * the context: a fresh cache per call re-derived the matchers of every other node for each node compiled
   * (O(N) rule parses per node, O(N²) per tailnet), the top of the server's profile under a realistic policy.
   */
  readonly matcherCache = new Map<string, { srcs: IPSet; dsts: IPSet }[]>();

  info(id: string): NodeInfo {
    const i = this.byId.get(id);
    if (!i) throw new Error(`unknown node ${JSON.stringify(id)}`);
    return i;
  }

  /** sshRules compiles the node's SSH policy; null when the policy has no ssh section. */
  sshRules(i: NodeInfo): SSHRule[] | null {
    const pol = this.policy;
    if (!pol || pol.ssh.length === 0) return null;
    const rules: SSHRule[] = [];
    for (const rule of pol.ssh) {
      const src = this.resolveAll(rule.src);
      if (src.isEmpty()) continue;
      const action: SSHAction = rule.action === 'accept'
        ? { accept: true, allowAgentForwarding: true, allowLocalPortForwarding: true, allowRemotePortForwarding: true }
        : { holdAndDelegate: 'https://unused' + CHECK_HOLD_URL };
      const users: Record<string, string> = {};
      if (rule.users.includes('autogroup:nonroot')) users['*'] = '=';
      users['root'] = rule.users.includes('root') ? 'root' : '';
      // Only `localpart:*@domain` is a localpart pattern; other spellings are plain user names.
      const isLocalpart = (u: string) => u.startsWith('localpart:*@') && u.length > 12;
      for (const u of rule.users) {
        if (u !== 'root' && u !== 'autogroup:nonroot' && !isLocalpart(u)) users[u] = u;
      }
      const localpartDomains = rule.users.filter(isLocalpart).map((u) => u.slice(12).toLowerCase());
      const localpartOf = new Map<string, string>();
      for (const u of this.snapshot.users) {
        const at = u.email?.lastIndexOf('@') ?? -1;
        if (!u.email || at < 0) continue;
        if (localpartDomains.includes(u.email.slice(at + 1).toLowerCase())) localpartOf.set(u.id, u.email.slice(0, at));
      }
      const hasLocalpart = rule.users.some(isLocalpart);
      // Principals are grouped by owning user (sorted ids), tagged sources last.
      const byUser = new Map<string, IPSet>();
      const tagged: SSHPrincipal[] = [];
      for (const n of this.infos) {
        if (!n.addrs.some((a) => src.containsAddr(a))) continue;
        if (n.tagged) { for (const ip of n.ips.strings()) tagged.push({ nodeIP: ip }); continue; }
        if (!n.node.userId) continue;
        byUser.set(n.node.userId, (byUser.get(n.node.userId) ?? new IPSet()).union(n.ips));
      }
      const userIds = [...byUser.keys()].sort(compareIds);
      // One principal per address (a client reads nodeIP as a single address): each range walked address by address.
      const principalsOf = (uid: string) => (byUser.get(uid)?.ranges ?? []).flatMap((r) => {
        const out: SSHPrincipal[] = [];
        for (let n = r.start; n <= r.end; n++) out.push({ nodeIP: addrText({ v6: r.v6, n }) });
        return out;
      });
      const add = (principals: SSHPrincipal[], uid: string | null) => {
        const r: SSHRule = { principals, sshUsers: users, action };
        if (rule.acceptEnv.length > 0) r.acceptEnv = rule.acceptEnv;
        rules.push(r);
        const lp = uid === null ? undefined : localpartOf.get(uid);
        if (lp !== undefined) {
          const r2: SSHRule = { principals, sshUsers: { [lp]: lp }, action };
          if (rule.acceptEnv.length > 0) r2.acceptEnv = rule.acceptEnv;
          rules.push(r2);
        }
      };
      const selfDst = rule.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:self');
      const otherDst = rule.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:self'));
      if (selfDst && !i.tagged && i.node.userId) {
        const p = principalsOf(i.node.userId);
        if (p.length > 0) add(p, i.node.userId);
      }
      if (otherDst.length > 0) {
        const dst = this.resolveAll(otherDst);
        if (i.addrs.some((a) => dst.containsAddr(a))) {
          if (hasLocalpart) {
            for (const uid of userIds) add(principalsOf(uid), uid);
            if (tagged.length > 0) add(tagged, null);
          } else {
            const all = [...userIds.flatMap(principalsOf), ...tagged];
            if (all.length > 0) add(all, null);
          }
        } else if (hasLocalpart && i.addrs.some((a) => src.containsAddr(a))) {
          // With localpart users, a source device also gets the rule for its own login.
          if (i.tagged) add(i.ips.strings().map((ip) => ({ nodeIP: ip })), null);
          else if (i.node.userId && byUser.has(i.node.userId)) add(principalsOf(i.node.userId), i.node.userId);
        }
      }
    }
    const isCheck = (r: SSHRule) => !!r.action.holdAndDelegate;
    return [...rules.filter(isCheck), ...rules.filter((r) => !isCheck(r))];
  }

  /** capMap is what nodeAttrs (and randomizeClientPort) add to the node's own CapMap. */
  capMap(i: NodeInfo): Record<string, unknown[] | null> {
    const out: Record<string, unknown[] | null> = {};
    const pol = this.policy;
    if (!pol) return out;
    if (pol.randomizeClientPort) out['randomize-client-port'] = null;
    for (const na of pol.nodeAttrs) {
      const target = this.resolveAll(na.target);
      if (!i.addrs.some((a) => target.containsAddr(a))) continue;
      for (const a of na.attr) {
        if (!(a in out)) out[a] = null;
        // Funnel comes with the ports clients may expose and a reminder to enable HTTPS.
        if (a === 'funnel') for (const extra of FUNNEL_COMPANIONS) if (!(extra in out)) out[extra] = null;
      }
      if (na.app) for (const [k, v] of Object.entries(na.app)) out[k] = [...((out[k] as unknown[] | null) ?? []), ...v];
    }
    return out;
  }
}

const FUNNEL_COMPANIONS = [
  'https://tailscale.com/cap/funnel-ports?ports=443,8443,10000',
  'https://tailscale.com/cap/warn-funnel-no-https',
];

function compareIds(a: string, b: string): number {
  const na = Number(a);
  const nb = Number(b);
  if (Number.isFinite(na) && Number.isFinite(nb)) return na - nb;
  return a < b ? -1 : a > b ? 1 : 0;
}

function addrText(a: Addr): string {
  return new IPSet([{ v6: a.v6, start: a.n, end: a.n }]).strings()[0]!;
}

function canAccess(a: NodeInfo, b: NodeInfo, matchers: { srcs: IPSet; dsts: IPSet }[]): boolean {
  for (const m of matchers) {
    const srcOk = a.addrs.some((x) => m.srcs.containsAddr(x)) || m.srcs.overlaps(a.subnetSet);
    if (!srcOk) continue;
    if (b.addrs.some((x) => m.dsts.containsAddr(x))) return true;
    if (m.dsts.overlaps(b.subnetSet)) return true;
    if (b.exitRoutes.length > 0 && (m.dsts.containsRange(parseRangeText('0.0.0.0/0')!) ||
      m.dsts.containsRange(parseRangeText('::/0')!) || INTERNET.subsetOf(m.dsts))) return true;
  }
  return false;
}

function withProto(r: FilterRule, protos: number[] | null): FilterRule {
  return protos ? { ...r, IPProto: protos } : r;
}

/** prefixesWithBits lists a set as CIDRs, always with an explicit /bits (CapGrant form). */
function prefixesWithBits(set: IPSet): string[] {
  return set.prefixes().map((p) => (p.includes('/') ? p : p.includes(':') ? `${p}/128` : `${p}/32`));
}

function companionRules(dstIPs: string[], srcPrefixes: string[], app: Record<string, unknown[]>): FilterRule[] {
  return COMPANIONS.filter(([orig]) => orig in app).map(([, companion]) => ({
    SrcIPs: dstIPs,
    CapGrant: [{ Dsts: srcPrefixes, CapMap: { [companion]: null } }],
  }));
}

/** mergeRules joins DstPorts of rules with identical sources and protocols, keeping order. */
function mergeRules(rules: FilterRule[]): FilterRule[] {
  const out: FilterRule[] = [];
  const index = new Map<string, number>();
  for (const r of rules) {
    if (r.CapGrant) { out.push(r); continue; }
    const key = `${r.SrcIPs.join(',')}|${(r.IPProto ?? []).join(',')}`;
    const at = index.get(key);
    if (at !== undefined) {
      out[at] = { ...out[at]!, DstPorts: [...(out[at]!.DstPorts ?? []), ...(r.DstPorts ?? [])] };
    } else {
      index.set(key, out.length);
      out.push({ ...r, DstPorts: [...(r.DstPorts ?? [])] });
    }
  }
  return out;
}

/** primaryRoutes picks, for every approved subnet route, the node that serves it: the
 * first node (in snapshot order, which callers keep in registration order) that advertises
 * and has it approved, preferring online nodes. Exit routes have no primary. */
export function referencePrimaryRoutes(ctx: ReferenceTailnetContext): Map<string, string> {
  const out = new Map<string, string>();
  for (const prefer of [true, false]) {
    for (const i of ctx.infos) {
      if (prefer && i.node.online === false) continue;
      for (const r of i.subnetRoutes) if (!out.has(r)) out.set(r, i.node.id);
    }
  }
  return out;
}

/** compilePolicy compiles everything one node receives from the policy. */
export function referenceCompilePolicy(policy: Policy | null, snapshot: Snapshot, nodeId: string, ctx = new ReferenceTailnetContext(policy, snapshot)): CompiledNode {
  const i = ctx.info(nodeId);
  const ssh = ctx.sshRules(i);
  return {
    packetFilter: ctx.packetFilter(i),
    sshPolicy: ssh === null ? null : { rules: ssh },
    capMap: ctx.capMap(i),
    peers: ctx.peers(i, ctx.matcherCache).map((p) => p.node.id),
    approvedRoutes: i.approved,
    randomizeClientPort: policy?.randomizeClientPort ?? false,
  };
}
