import type { Policy } from './policy.js';
import { TailnetContext, type Snapshot } from './compile.js';

/** policyWarnings lists consequences an admin should confirm before applying a policy,
 * e.g. member devices that can reach each other now but would not under the policy. */
export function policyWarnings(policy: Policy, snapshot: Snapshot): string[] {
  const warnings: string[] = [];
  const ctx = new TailnetContext(policy, snapshot);
  const members = ctx.infos.filter((i) => !i.tagged);
  if (members.length >= 2) {
    const cache = new Map();
    const connected = members.some((m) => ctx.peers(m, cache).some((p) => !p.tagged));
    if (!connected) {
      warnings.push('no rule lets member devices reach each other: devices will lose connectivity they have today');
    }
  }
  if (policy.acls !== null && policy.acls.length === 0 && (policy.grants === null || policy.grants.length === 0)) {
    warnings.push('the policy has an empty acls list and no grants: all traffic between devices will be denied');
  }
  for (const i of ctx.infos) {
    if (i.node.online !== false && ctx.peers(i, new Map()).length === 0 && ctx.infos.length > 1) {
      warnings.push(`device ${i.node.name} will see no peers`);
    }
  }
  return warnings;
}
