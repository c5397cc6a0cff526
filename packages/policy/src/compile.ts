import type { Policy } from './policy.js';
import { TailnetContext } from './compile/context.js';
import type { CompiledNode, PolicyNode, PolicyUser, Snapshot } from './compile/types.js';

/**
 * The policy compiler's entry points: compilePolicy (everything one node receives) and the context it runs on
 * (TailnetContext, compile/context.ts, which lists the parts it is made of).
 */
export {
  ALLOW_ALL, CHECK_HOLD_URL,
  type PolicyUser, type PolicyNode, type Snapshot, type NetPortRange, type CapGrant, type FilterRule,
  type SSHPrincipal, type SSHAction, type SSHRule, type CompiledNode,
} from './compile/types.js';
export { TailnetContext } from './compile/context.js';
export { offerContext, preparedContext } from './compile/offer.js';
export { primaryRoutes } from './compile/routes.js';
export { sshCheckPeriodMs, SSH_CHECK_PERIOD_DEFAULT_MS } from './compile/ssh.js';

/**
 * approvedRoutesOf is what compilePolicy gives as `node`'s approvedRoutes (its admin approvals plus what the
 * policy's autoApprovers approve), from the node and the users alone. Whether an approver includes the node (a
 * user, group, tag, autogroup, host or prefix) turns on the node's owner, tags and addresses, never on the rest
 * of the tailnet; and the grants, compiled lazily, are not compiled at all. Cost O(users + autoApprovers).
 */
export function approvedRoutesOf(policy: Policy | null, users: PolicyUser[], node: PolicyNode): string[] {
  return new TailnetContext(policy, { users, nodes: [node] }).info(node.id).approved;
}

/** compilePolicy compiles everything one node receives from the policy. */
export function compilePolicy(policy: Policy | null, snapshot: Snapshot, nodeId: string, ctx = new TailnetContext(policy, snapshot)): CompiledNode {
  const i = ctx.info(nodeId);
  const ssh = ctx.sshRules(i);
  const out: CompiledNode = {
    packetFilter: ctx.packetFilter(i),
    sshPolicy: ssh === null ? null : { rules: ssh },
    capMap: ctx.capMap(i),
    // Read from the context on each access, not kept: a node's list is its class's shared list less itself (a copy
    // of hundreds of ids), and a server keeps every node's result (NetworkView) while the tailnet stands still.
    // Readers take it once per use (a map, a flush).
    get peers() { return ctx.peerIds(i); },
    approvedRoutes: i.approved,
    randomizeClientPort: policy?.randomizeClientPort ?? false,
  };
  // Not enumerable: a copy ({...c}, mergeCompiled) has its own peers and no class list.
  Object.defineProperty(out, PEER_LIST, { value: () => ({ ids: ctx.peerClassIds(i), self: nodeId }) });
  return out;
}

const PEER_LIST = Symbol('peerList');

/**
 * peerListOf is a compiled node's peers as its class's shared list and the node's own id, which the list holds
 * when the node is a member of its class: a reader that parses lists can parse each shared list once (per class,
 * not per node) and drop the node itself from its own copy. Undefined for results not made by compilePolicy
 * (or copied): read `peers` then.
 */
export function peerListOf(c: CompiledNode): { ids: readonly string[]; self: string } | undefined {
  const f = (c as unknown as Record<symbol, (() => { ids: readonly string[]; self: string }) | undefined>)[PEER_LIST];
  return f?.();
}
