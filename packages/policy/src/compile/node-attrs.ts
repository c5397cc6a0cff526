import { dict, type Policy } from '../policy.js';
import type { AliasResolver } from './aliases.js';
import type { NodeInfo } from './nodes.js';

/** Funnel comes with the ports clients may expose and a reminder to enable HTTPS. */
const FUNNEL_COMPANIONS = [
  'https://tailscale.com/cap/funnel-ports?ports=443,8443,10000',
  'https://tailscale.com/cap/warn-funnel-no-https',
];

/** nodeCapMap is what nodeAttrs (and randomizeClientPort) add to the node's own CapMap. */
export function nodeCapMap(policy: Policy | null, aliases: AliasResolver, i: NodeInfo): Record<string, unknown[] | null> {
  const out = dict<unknown[] | null>();
  const pol = policy;
  if (!pol) return out;
  if (pol.randomizeClientPort) out['randomize-client-port'] = null;
  for (const na of pol.nodeAttrs) {
    const target = aliases.resolveAll(na.target);
    if (!i.addrs.some((a) => target.containsAddr(a))) continue;
    for (const a of na.attr) {
      if (!(a in out)) out[a] = null;
      if (a === 'funnel') for (const extra of FUNNEL_COMPANIONS) if (!(extra in out)) out[extra] = null;
    }
    if (na.app) for (const [k, v] of Object.entries(na.app)) out[k] = [...((out[k] as unknown[] | null) ?? []), ...v];
  }
  return out;
}
