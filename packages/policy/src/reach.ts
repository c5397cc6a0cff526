import { ALL, IPSet } from './ip.js';
import { TailnetContext, type FilterRule, type Snapshot } from './compile.js';
import type { NodeInfo } from './compile/nodes.js';
import type { Policy } from './policy.js';
import { ruleSources } from './tests.js';

/** ReachEntry is one other node and the ports (as "22", "80-443", "*", with "/proto N" when the rule names protocols) traffic may use. */
export interface ReachEntry {
  id: string;
  name: string;
  ports: string[];
}

/** NodeReach is one node's view under a policy: whom it may connect to, who may connect to it, and the peers it is sent. */
export interface NodeReach {
  canReach: ReachEntry[];
  reachableFrom: ReachEntry[];
  peers: { id: string; name: string }[];
}

const portText = (r: { First: number; Last: number }) => (r.First === 0 && r.Last === 65535 ? '*' : r.First === r.Last ? String(r.First) : `${r.First}-${r.Last}`);

/** admitted lists the ports `dst`'s packet filter opens to any address of `src` on `dst`'s own addresses; empty when none. */
function admitted(rules: FilterRule[], src: NodeInfo, dst: NodeInfo): string[] {
  const out = new Set<string>();
  for (const r of rules) {
    if (!r.DstPorts) continue;
    const srcs = ruleSources(r);
    if (!src.addrs.some((a) => srcs.containsAddr(a))) continue;
    const proto = r.IPProto?.length ? `/proto ${r.IPProto.join(',')}` : '';
    for (const d of r.DstPorts) {
      const set = d.IP === '*' ? ALL : IPSet.of(d.IP);
      if (dst.addrs.some((a) => set.containsAddr(a))) out.add(`${portText(d.Ports)}${proto}`);
    }
  }
  return [...out];
}

/**
 * nodeReach answers, for the node `nodeId` of the snapshot under `policy` (null: no policy, everything allowed),
 * which nodes it may open connections to (their packet filters admit it), which nodes may open connections to it
 * (its packet filter admits them), and the peers its netmap holds. Only the nodes' own addresses count, not the
 * subnets they route. Throws when the snapshot has no such node.
 */
export function nodeReach(policy: Policy | null, snapshot: Snapshot, nodeId: string): NodeReach {
  const ctx = new TailnetContext(policy, snapshot);
  const self = ctx.info(nodeId);
  const own = ctx.packetFilter(self);
  const canReach: ReachEntry[] = [];
  const reachableFrom: ReachEntry[] = [];
  for (const other of ctx.infos) {
    if (other === self) continue;
    const out = admitted(ctx.packetFilter(other), self, other);
    if (out.length) canReach.push({ id: other.node.id, name: other.node.name, ports: out });
    const inward = admitted(own, other, self);
    if (inward.length) reachableFrom.push({ id: other.node.id, name: other.node.name, ports: inward });
  }
  return { canReach, reachableFrom, peers: ctx.peers(self).map((p) => ({ id: p.node.id, name: p.node.name })) };
}
