import type { Alias, Policy } from './policy.js';
import { offerContext, TailnetContext, type PolicyUser, type Snapshot } from './compile.js';

/** policyWarnings lists consequences an admin should confirm before applying a policy,
 * e.g. member devices that can reach each other now but would not under the policy. */
export function policyWarnings(policy: Policy, snapshot: Snapshot): string[] {
  const warnings: string[] = [];
  const ctx = new TailnetContext(policy, snapshot);
  const members = ctx.infos.filter((i) => !i.tagged);
  // The context's peer index is built once for all nodes (a per-node rebuild was O(N²)), and the checks read it
  // without building any node's peer list: at 10,000 devices those lists (3,900 peers each) took 1 s of a
  // policy change, before any device heard of it.
  if (members.length >= 2) {
    const connected = members.some((m) => ctx.somePeer(m, (p) => !p.tagged));
    if (!connected) {
      warnings.push('no rule lets member devices reach each other: devices will lose connectivity they have today');
    }
  }
  if (policy.acls !== null && policy.acls.length === 0 && (policy.grants === null || policy.grants.length === 0)) {
    warnings.push('the policy has an empty acls list and no grants: all traffic between devices will be denied');
  }
  for (const i of ctx.infos) {
    if (i.node.online !== false && ctx.infos.length > 1 && ctx.peerCount(i) === 0) {
      warnings.push(`device ${i.node.name} will see no peers`);
    }
  }
  warnings.push(...(policy.unenforced ?? []));
  // Whoever installs this policy next compiles it against the same tailnet: the context is offered to it.
  offerContext(ctx);
  return warnings;
}

const NOT_A_USER = /^(group:|tag:|autogroup:|user:\*@|localpart:)/;

/**
 * userReferences lists, once each and in order of appearance, the users a policy names
 * (`alice@`, `bob@example.com`): in groups, tagOwners and every rule's sources and targets.
 */
export function userReferences(policy: Policy): string[] {
  const out = new Set<string>();
  const raw = (s: string) => {
    if (s.includes('@') && !NOT_A_USER.test(s)) out.add(s);
  };
  const alias = (a: Alias) => {
    if (a.kind === 'user') out.add(a.name);
  };
  for (const members of Object.values(policy.groups)) members.forEach(raw);
  for (const owners of Object.values(policy.tagOwners)) owners.forEach(raw);
  for (const r of policy.acls ?? []) {
    r.src.forEach(alias);
    r.dst.forEach((d) => alias(d.alias));
  }
  for (const g of policy.grants ?? []) [...g.src, ...g.dst].forEach(alias);
  for (const r of policy.ssh) [...r.src, ...r.dst].forEach(alias);
  for (const n of policy.nodeAttrs) n.target.forEach(alias);
  for (const approvers of Object.values(policy.autoApprovers.routes)) approvers.forEach(alias);
  policy.autoApprovers.exitNode.forEach(alias);
  return [...out];
}

/**
 * userReferenceWarnings flags users the policy names that match no live user (a typo, or
 * someone not yet created) or several (ambiguous), the same way rules resolve them: `name@`
 * or an e-mail address. With users unknown (offline) it says which could not be verified.
 */
export function userReferenceWarnings(policy: Policy, users: PolicyUser[] | undefined): string[] {
  const refs = userReferences(policy);
  if (refs.length === 0) return [];
  if (users === undefined) return [`users are not verified offline: ${refs.join(', ')}`];
  const warnings: string[] = [];
  const known = users.map((u) => u.name).sort().join(', ') || 'none';
  for (const ref of refs) {
    const bare = ref.endsWith('@') ? ref.slice(0, -1) : ref;
    const matches = users.filter((u) => u.email === bare || u.name === bare);
    if (matches.length === 0) warnings.push(`user ${JSON.stringify(ref)} does not exist, so rules naming it match no device (users: ${known})`);
    else if (matches.length > 1) warnings.push(`user ${JSON.stringify(ref)} matches ${matches.length} users (${matches.map((u) => u.name).join(', ')}), so rules naming it match no device`);
  }
  return warnings;
}
