import { INTERNET, IPSet, parseSetText } from '../ip.js';
import type { Alias, Grant, Policy, ProtoPorts } from '../policy.js';
import type { AliasResolver } from './aliases.js';
import type { NodeIndex, NodeInfo } from './nodes.js';
import { knownPorts, srcList } from './rules.js';
import type { CapGrant, FilterRule, NetPortRange } from './types.js';

/**
 * Grants compiled into filter rules: each grant (acls as grants) gives rules every node shares, and the parts that
 * depend on the node: autogroup:self rules (per user, selfRules) and via rules (per router, viaRules).
 */

/** CompiledGrant is one grant's rules for every node, and what its autogroup:self and via rules are made from. */
export interface CompiledGrant {
  rules: FilterRule[];
  self: { srcs: IPSet[]; ip: ProtoPorts[]; app: Record<string, unknown[]> | null } | null;
  via: { tags: string[]; dsts: IPSet[]; internet: boolean; ip: ProtoPorts[]; srcIPs: string[]; srcSet: IPSet } | null;
}

/** NO_GRANT stands for a grant that compiles to nothing, so grant indices (and rule positions) never shift. */
const NO_GRANT: CompiledGrant = { rules: [], self: null, via: null };

const CAP_DRIVE = 'tailscale.com/cap/drive';
const CAP_DRIVE_SHARER = 'tailscale.com/cap/drive-sharer';
const CAP_RELAY = 'tailscale.com/cap/relay';
const CAP_RELAY_TARGET = 'tailscale.com/cap/relay-target';
/** COMPANIONS: an app capability granted one way gives its destinations the companion capability the other way. */
const COMPANIONS: [string, string][] = [[CAP_DRIVE, CAP_DRIVE_SHARER], [CAP_RELAY, CAP_RELAY_TARGET]];

/** grantsOf is the policy's grants followed by its acls as grants (an acl's autogroup:self destinations last). */
function grantsOf(pol: Policy): Grant[] {
  const grants: Grant[] = [...(pol.grants ?? [])];
  for (const acl of pol.acls ?? []) {
    const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
    const ordered = [...acl.dst.filter((d) => !isSelf(d.alias)), ...acl.dst.filter((d) => isSelf(d.alias))];
    for (const d of ordered) {
      grants.push({ src: acl.src, dst: [d.alias], ip: [{ protos: acl.proto, ports: d.ports }], app: null, via: [] });
    }
  }
  return grants;
}

/** GrantCompiler compiles a policy's grants on one context's tailnet, again only for grants whose sets changed. */
export class GrantCompiler {
  /** grantSpecs are the policy's grants (acls as grants); grantMemo each one compiled, with the alias sets it used. */
  private grantSpecs?: Grant[];
  private readonly grantMemo: { src: (IPSet | null)[]; dst: (IPSet | null)[]; out: CompiledGrant }[] = [];
  private subnetRouteStrings?: string[];

  constructor(private readonly aliases: AliasResolver, private readonly nodes: NodeIndex) {}

  /**
   * compileGrants compiles each grant (acls as grants) in order. A grant compiled before in this context (before an
   * extension) whose aliases resolve to the very same sets is not compiled again: its rules are the same objects,
   * so merging keeps the rules made from them (see RuleMerger) and what they know of the nodes.
   */
  compileGrants(pol: Policy): CompiledGrant[] {
    this.grantSpecs ??= grantsOf(pol);
    return this.grantSpecs.map((g, k) => {
      const src = this.aliases.resolveList(g.src), dst = this.aliases.resolveList(g.dst);
      const memo = this.grantMemo[k];
      const same = (a: (IPSet | null)[], b: (IPSet | null)[]) => a === b || a.every((d, j) => d === b[j]);
      if (memo && same(memo.src, src) && same(memo.dst, dst)) return memo.out;
      const out = this.compileGrant(g) ?? NO_GRANT;
      this.grantMemo[k] = { src, dst, out };
      return out;
    });
  }

  private compileGrant(g: Grant): CompiledGrant | null {
    if (g.src.length === 0 || g.dst.length === 0) return null;
    // Once per source list: an acl's grants (one per destination) share its list.
    const srcSets = this.aliases.resolveList(g.src);
    const srcUnion = srcSets.length === 1 ? srcSets[0] ?? new IPSet() : this.aliases.resolveAll(g.src);
    const srcIPs = this.srcStrings(g.src, srcUnion);
    if (g.via.length > 0) {
      if (srcUnion.isEmpty()) return null;
      const internet = g.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:internet');
      const dsts = g.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:internet'))
        .map((a) => this.aliases.resolve(a)).filter((s): s is IPSet => !!s);
      return { rules: [], self: null, via: { tags: g.via, dsts, internet, ip: g.ip, srcIPs, srcSet: srcUnion } };
    }
    const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
    const other = g.dst.filter((a) => !isSelf(a));
    const rules: FilterRule[] = [];
    if (other.length > 0) {
      for (const pp of g.ip) {
        const dstPorts: NetPortRange[] = [];
        // Each entry's set, as piecePorts would parse it from the entry's text.
        const entrySets: IPSet[] = [];
        // The destinations' union is made once, at the end (a union per alias would be quadratic in the aliases).
        const dstSets: IPSet[] = [];
        for (const d of other) {
          if (d.kind === 'wildcard') {
            const all = parseSetText('*');
            for (const p of pp.ports) { dstPorts.push({ IP: '*', Ports: p }); entrySets.push(all); }
            dstSets.push(all);
            continue;
          }
          const set = this.aliases.resolve(d);
          if (!set) continue;
          const sets = set.prefixSets();
          set.prefixes().forEach((pref, k) => { for (const p of pp.ports) { dstPorts.push({ IP: pref, Ports: p }); entrySets.push(sets[k]!); } });
          dstSets.push(set);
        }
        const dsts = dstSets.length === 1 ? dstSets[0]! : new IPSet(dstSets.flatMap((x) => x.ranges));
        if (dstPorts.length > 0 && srcIPs.length > 0) {
          const rule = withProto({ SrcIPs: srcIPs, DstPorts: dstPorts }, pp.protos);
          knownPorts(rule, { entrySets, dsts });
          rules.push(rule);
        }
      }
      if (g.app) {
        const capGrants: CapGrant[] = [];
        const dstIPs: string[] = [];
        for (const d of other) {
          const set = this.aliases.resolve(d);
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
    const self = g.dst.some(isSelf) ? { srcs: srcSets.map((x) => x ?? new IPSet()), ip: g.ip, app: g.app } : null;
    return { rules, self, via: null };
  }

  /** approvedSubnetRouteStrings are every approved subnet route of the tailnet, each once. */
  private approvedSubnetRouteStrings(): string[] {
    this.subnetRouteStrings ??= [...new Set(this.nodes.infos.flatMap((i) => i.subnetRoutes))];
    return this.subnetRouteStrings;
  }

  private srcStrings(srcAliases: Alias[], resolved: IPSet): string[] {
    if (srcAliases.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:danger-all')) return ['*'];
    if (resolved.isEmpty()) return [];
    if (!srcAliases.some((a) => a.kind === 'wildcard')) return srcList(resolved);
    // "*" also covers every approved subnet route, listed route by route.
    const out = resolved.strings();
    const seen = new Set(out);
    const add = (s: string) => { if (!seen.has(s)) { seen.add(s); out.push(s); } };
    for (const r of this.approvedSubnetRouteStrings()) add(r);
    for (const a of srcAliases) {
      if (a.kind === 'wildcard') continue;
      for (const s of (this.aliases.resolve(a) ?? new IPSet()).strings()) add(s);
    }
    return out;
  }

  /** selfRules are a grant's autogroup:self rules for the user of untagged node i: among that user's own nodes. */
  selfRules(s: NonNullable<CompiledGrant['self']>, i: NodeInfo): FilterRule[] {
    if (i.tagged || !i.node.userId) return [];
    const same = this.nodes.nodesByUser.get(i.node.userId) ?? [];
    const srcNodes = same.filter((n) => s.srcs.some((set) => n.addrs.some((a) => set.containsAddr(a))));
    const src = new IPSet(srcNodes.flatMap((n) => n.ips.ranges));
    if (src.isEmpty()) return [];
    const rules: FilterRule[] = [];
    for (const pp of s.ip) {
      const dstPorts: NetPortRange[] = [];
      for (const n of same) for (const p of pp.ports) for (const ip of n.ips.strings()) dstPorts.push({ IP: ip, Ports: p });
      if (dstPorts.length > 0) rules.push(withProto({ SrcIPs: srcList(src), DstPorts: dstPorts }, pp.protos));
    }
    if (s.app) {
      const caps = same.map((n) => ({ Dsts: prefixesWithBits(n.ips), CapMap: s.app! }));
      rules.push({ SrcIPs: srcList(src), CapGrant: caps });
      rules.push(...companionRules(same.flatMap((n) => n.ips.strings()), prefixesWithBits(src), s.app));
    }
    return rules;
  }

  /** viaRules are a via grant's rules for tagged router i: its destinations that i routes. */
  viaRules(v: NonNullable<CompiledGrant['via']>, i: NodeInfo): FilterRule[] {
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
