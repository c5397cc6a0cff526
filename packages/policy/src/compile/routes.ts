import { INTERNET, IPSet, isExitRoute, parsePrefix, parseSetText } from '../ip.js';
import type { Alias, Policy } from '../policy.js';
import type { AliasResolver } from './aliases.js';
import type { TailnetContext } from './context.js';
import type { PacketFilters } from './filter.js';
import type { PreRule } from './merge.js';
import type { NodeInfo } from './nodes.js';
import type { RuleLists } from './scopes.js';

/**
 * Routes: which advertised routes are approved (an admin's approvals and the policy's autoApprovers), which node
 * serves each subnet route (primaryRoutes), and which viewers get a router's route in their AllowedIPs.
 */

/** approvedRoutes is i's admin approvals ∪ the routes the autoApprovers approve for it (unless applyAutoApprovers is off). */
export function approvedRoutes(i: NodeInfo, policy: Policy | null, aliases: AliasResolver, applyAutoApprovers: boolean): string[] {
  const out = new Set(i.node.approvedRoutes);
  const aa = policy?.autoApprovers;
  if (aa && applyAutoApprovers) {
    const includes = (a: Alias): boolean => {
      const set = aliases.resolve(a);
      return !!set && i.addrs.some((x) => set.containsAddr(x));
    };
    for (const route of i.node.availableRoutes) {
      const r = parsePrefix(route);
      if (!r) continue;
      if (isExitRoute(route)) {
        if (aa.exitNode.some(includes)) out.add(route);
        continue;
      }
      for (const [key, approvers] of Object.entries(aa.routes)) {
        const k = parsePrefix(key);
        if (!k || k.v6 !== r.v6 || k.start > r.start || k.end < r.end) continue;
        if (approvers.some(includes)) out.add(route);
      }
    }
  }
  return [...out];
}

/** settleRoutes records i's approved routes and splits the advertised ones it may serve into subnet and exit routes. */
export function settleRoutes(i: NodeInfo, approved: string[]): void {
  i.approved = approved;
  i.subnetRoutes = i.node.availableRoutes.filter((r) => !isExitRoute(r) && i.approved.includes(r));
  i.subnetSet = IPSet.of(...i.subnetRoutes);
  i.exitRoutes = i.node.availableRoutes.filter((r) => isExitRoute(r) && i.approved.includes(r));
}

/** primaryRoutes picks, for every approved subnet route, the node that serves it: the
 * first node (in snapshot order, which callers keep in registration order) that advertises
 * and has it approved, preferring online nodes. Exit routes have no primary. */
export function primaryRoutes(ctx: TailnetContext): Map<string, string> {
  const out = new Map<string, string>();
  for (const prefer of [true, false]) {
    for (const i of ctx.infos) {
      if (prefer && i.node.online === false) continue;
      for (const r of i.subnetRoutes) if (!out.has(r)) out.set(r, i.node.id);
    }
  }
  return out;
}

/** RouteVisibility answers which viewers get a router's routes, on one context generation. */
export class RouteVisibility {
  /** inbound: per viewer id, the union of its filter's sources. */
  private readonly inbound = new Map<string, IPSet>();

  constructor(private readonly rules: RuleLists, private readonly filters: PacketFilters) {}

  /** viaServes reports whether a via grant lets `user` reach something through `router`. */
  viaServes(user: NodeInfo, router: NodeInfo, prefix?: string): boolean {
    for (const g of this.rules.grants ?? []) {
      const v = g.via;
      if (!v || !v.tags.some((t) => router.node.tags.includes(t))) continue;
      if (!user.addrs.some((a) => v.srcSet.containsAddr(a))) continue;
      const routes = prefix ? parseSetText(prefix) : router.subnetSet;
      if (prefix && isExitRoute(prefix)) { if (v.internet) return true; continue; }
      if (v.dsts.some((d) => d.overlaps(routes))) return true;
      if (!prefix && v.internet && router.exitRoutes.length > 0) return true;
    }
    return false;
  }

  /** visible reports whether `viewer` gets route `prefix` of `router` in AllowedIPs (see TailnetContext.routeVisible). */
  visible(viewer: NodeInfo, router: NodeInfo, prefix: string, includeVia: boolean): boolean {
    const route = parseSetText(prefix);
    const exit = isExitRoute(prefix);
    const reaches = (dsts: IPSet) => (exit ? dsts.overlaps(INTERNET) : dsts.overlaps(route));
    // A standby router for the same prefix always knows the primary's route.
    if (viewer.subnetRoutes.includes(prefix)) return true;
    if (includeVia && this.viaServes(viewer, router, prefix)) return true;
    const sees = (x: PreRule) => (viewer.addrs.some((a) => x.srcs.containsAddr(a)) || x.srcs.overlaps(viewer.subnetSet)) && reaches(x.dsts);
    if (this.rules.matchersOf(viewer).some(sees) || (includeVia && this.rules.matchersOf(router).some(sees))) return true;
    if (exit) return false;
    let inbound = this.inbound.get(viewer.node.id);
    if (!inbound) {
      inbound = new IPSet(this.filters.compile(viewer).flatMap((r) => r.SrcIPs.flatMap((x) => parseSetText(x).ranges)));
      this.inbound.set(viewer.node.id, inbound);
    }
    return inbound.overlaps(route);
  }

  /** clear drops the viewers' filter sources, which an extension changes. */
  clear(): void {
    this.inbound.clear();
  }
}
