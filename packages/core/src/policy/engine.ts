import { checkPolicy, parsePolicy, policyWarnings, runPolicyTests, userReferenceWarnings, type Policy, type PolicyNode, type PolicyUser, type Snapshot } from '@headway/policy';
import { ownedByTags, type Node } from '../domain.js';
import type { State } from '../state/state.js';
import type { PolicyEngine } from './service.js';

/** snapshotOf presents live users and nodes to the policy compiler (`users`: the users already read, unchanged since). */
export function snapshotOf(state: State, users: PolicyUser[] = snapshotUsers(state)): Snapshot {
  return { users, nodes: state.nodes.list().map((n) => snapshotNode(state, n)) };
}

/** snapshotUsers are the tailnet's users as the policy compiler sees them. */
export function snapshotUsers(state: State): PolicyUser[] {
  // Provider groups join policy groups only when the operator says so (oidc.policy_groups).
  return state.users.list().map((u) => ({
    id: String(u.id), name: u.name, email: u.email || undefined,
    ...(state.config.oidc?.policy_groups && u.groups.length ? { groups: u.groups } : {}),
  }));
}

/** snapshotNode is one node as the policy compiler sees it. */
export function snapshotNode(state: State, n: Node): PolicyNode {
  return {
    id: String(n.id),
    name: n.givenName,
    userId: ownedByTags(n) ? undefined : String(n.userId),
    tags: n.tags,
    ipv4: n.ipv4 ?? undefined,
    ipv6: n.ipv6 ?? undefined,
    availableRoutes: n.availableRoutes,
    approvedRoutes: n.approvedRoutes,
    online: state.presence.isOnline(n.id),
  };
}

/** liveWarnings are the consequences worth confirming against live users and nodes, including users the policy names that do not exist. */
function liveWarnings(policy: Policy, snap: Snapshot): string[] {
  return [...policyWarnings(policy, snap), ...userReferenceWarnings(policy, snap.users)];
}

/**
 * hujsonEngine compiles with @headway/policy: syntax, references, then the
 * policy's own tests. Each call parses the text exactly once; the parsed policy
 * it returns is what PolicyService hands to everyone else.
 */
export const hujsonEngine: PolicyEngine = {
  compile(text, state) {
    const snap = snapshotOf(state);
    const policy = parsePolicy(text, { userNames: snap.users.map((u) => u.name) });
    runPolicyTests(policy, snap);
    return { policy, warnings: liveWarnings(policy, snap) };
  },
  check(text, state) {
    const snap = snapshotOf(state);
    const { policy, errors } = checkPolicy(text, { userNames: snap.users.map((u) => u.name) });
    if (!policy) return { errors: errors.map((e) => e.message), warnings: [] };
    try {
      runPolicyTests(policy, snap);
    } catch (e) {
      return { errors: [(e as Error).message], warnings: [] };
    }
    return { policy, errors: [], warnings: liveWarnings(policy, snap) };
  },
};
