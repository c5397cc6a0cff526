import type { Policy } from '../policy.js';
import type { TailnetContext } from './context.js';
import { sameList, samePlace } from './nodes.js';
import type { Snapshot } from './types.js';

/**
 * A context built to check a policy (policyWarnings builds one, with its peer index, for the whole tailnet) is
 * offered to the next compile of the same policy object on the same tailnet (NetworkView, when the policy is
 * installed, which happens in the same turn of the event loop), so that the tailnet's devices hear of the change
 * without a second context built first. Held weakly, so an offer nobody takes (a policy only checked) keeps
 * nothing alive.
 */
let offered: WeakRef<TailnetContext> | undefined;

/** offerContext makes ctx the context preparedContext hands out (replacing any offered before). */
export function offerContext(ctx: TailnetContext): void {
  offered = new WeakRef(ctx);
}

/**
 * preparedContext is the context offered for `policy` (the same object) if it was built on a tailnet equal to
 * `snapshot` in everything the compiler reads, and undefined otherwise. An offer is handed out once.
 */
export function preparedContext(policy: Policy | null, snapshot: Snapshot): TailnetContext | undefined {
  const ctx = offered?.deref();
  if (!ctx || ctx.policy !== policy) return undefined;
  offered = undefined;
  return sameTailnet(ctx.snapshot, snapshot) ? ctx : undefined;
}

/** sameTailnet: the same users and nodes, in the same order, as the compiler reads them (for a node: samePlace, its name and whether it is online). */
function sameTailnet(a: Snapshot, b: Snapshot): boolean {
  if (a.users.length !== b.users.length || a.nodes.length !== b.nodes.length) return false;
  for (let k = 0; k < a.users.length; k++) {
    const u = a.users[k]!, v = b.users[k]!;
    if (u.id !== v.id || u.name !== v.name || u.email !== v.email || !sameList(u.groups, v.groups)) return false;
  }
  for (let k = 0; k < a.nodes.length; k++) {
    const n = a.nodes[k]!, m = b.nodes[k]!;
    if (!samePlace(n, m) || n.name !== m.name || n.online !== m.online) return false;
  }
  return true;
}
