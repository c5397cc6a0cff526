import type { Node, NodePatch } from '../domain.js';
import { canonicalPrefix } from '@headway/policy/ip';
import type { Hostinfo, MapRequest } from '../wire/wire.js';
import type { PeerPatch } from './bus.js';
import type { RouteService } from './routes.js';
import type { State } from './state.js';

/** routesFromHostinfo is the canonical, sorted set of subnet and exit routes a Hostinfo advertises. */
export function routesFromHostinfo(h: Hostinfo | undefined): string[] {
  const out = new Set<string>();
  for (const r of h?.RoutableIPs ?? []) {
    const c = typeof r === 'string' && r.includes('/') ? canonicalPrefix(r) : undefined;
    if (c) out.add(c);
  }
  return [...out].sort();
}

/** NodeReport is what a device reports about itself in a (validated) map request. */
export type NodeReport = Pick<MapRequest, 'DiscoKey' | 'Endpoints' | 'Hostinfo'>;

/**
 * HostinfoService stores what devices report on their map requests (disco key,
 * endpoints, Hostinfo) and tells peers the smallest change: a patch when only
 * the disco key, endpoints or home DERP moved, a full peer change when the
 * Hostinfo or the advertised routes did. Routes the policy auto-approves for a
 * newly advertised set go in the same write as the Hostinfo (autoApprovedPatch),
 * and the primary election runs before the change is published (RouteService.commit).
 */
export class HostinfoService {
  constructor(private readonly state: State, private readonly routes: RouteService) {}

  /** update applies one report from a node's device and returns the node as stored. */
  async update(node: Node, report: NodeReport): Promise<Node> {
    const patch: PeerPatch = {};
    const store: NodePatch = {};
    if (report.DiscoKey && report.DiscoKey !== node.discoKey) {
      store.discoKey = patch.discoKey = report.DiscoKey;
    }
    if (report.Endpoints && JSON.stringify(report.Endpoints) !== JSON.stringify(node.endpoints)) {
      store.endpoints = patch.endpoints = report.Endpoints;
    }
    let full = false;
    if (report.Hostinfo) {
      const before = (node.hostinfo ?? {}) as { NetInfo?: { PreferredDERP?: number } };
      const derp = report.Hostinfo.NetInfo?.PreferredDERP;
      if (derp && derp !== before.NetInfo?.PreferredDERP) patch.derpRegion = derp;
      const strip = (h: Record<string, unknown>) => JSON.stringify({ ...h, NetInfo: undefined });
      const routes = routesFromHostinfo(report.Hostinfo);
      const routesMoved = JSON.stringify(routes) !== JSON.stringify(node.availableRoutes);
      // A node whose stored Hostinfo was quarantined (null) takes the first one it sends again.
      full = node.hostinfo === null || strip(report.Hostinfo) !== strip(before as Record<string, unknown>) || routesMoved;
      store.hostinfo = report.Hostinfo;
      if (report.Hostinfo.Hostname) store.hostname = report.Hostinfo.Hostname;
      store.availableRoutes = routes;
    }
    let current = node;
    if (full) {
      [current] = (await this.routes.commit([{ id: node.id, patch: store }])) as [Node];
      if (Object.keys(patch).length) this.state.nodes.publishPatch(node.id, patch);
    } else if (Object.keys(store).length) {
      current = await this.state.nodes.update(node.id, store, 'silent');
      if (Object.keys(patch).length) this.state.nodes.publishPatch(node.id, patch);
    }
    return current;
  }
}
