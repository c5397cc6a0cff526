import { parsePolicy, policyWarnings, runPolicyTests, type Snapshot } from '@headway/policy';
import { ownedByTags } from '../domain.js';
import type { State } from '../state/state.js';
import type { PolicyEngine } from './service.js';

/** snapshotOf presents live users and nodes to the policy compiler. */
export function snapshotOf(state: State): Snapshot {
  return {
    users: state.listUsers().map((u) => ({ id: String(u.id), name: u.name, email: u.email || undefined })),
    nodes: state.listNodes().map((n) => ({
      id: String(n.id),
      name: n.givenName,
      userId: ownedByTags(n) ? undefined : String(n.userId),
      tags: n.tags,
      ipv4: n.ipv4 ?? undefined,
      ipv6: n.ipv6 ?? undefined,
      availableRoutes: n.availableRoutes,
      approvedRoutes: n.approvedRoutes,
      online: state.isOnline(n.id),
    })),
  };
}

/** hujsonEngine validates with @headway/policy: syntax, references, then the policy's own tests. */
export const hujsonEngine: PolicyEngine = {
  validate(text, state) {
    const policy = parsePolicy(text);
    const snap = snapshotOf(state);
    runPolicyTests(policy, snap);
    return { warnings: policyWarnings(policy, snap) };
  },
  definedTags(text) {
    try {
      return Object.keys(parsePolicy(text).tagOwners ?? {});
    } catch {
      return undefined;
    }
  },
};
