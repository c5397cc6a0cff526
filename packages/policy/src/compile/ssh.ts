import { IPSet, formatAddr, type Addr } from '../ip.js';
import { dict, parseGoDuration, type Policy, type SshRule as SshRuleSpec } from '../policy.js';
import type { AliasResolver } from './aliases.js';
import type { NodeIndex, NodeInfo } from './nodes.js';
import { CHECK_HOLD_URL, type SSHAction, type SSHPrincipal, type SSHRule } from './types.js';

/** SSH_CHECK_PERIOD_DEFAULT_MS is how long an approved check lasts when a rule names no checkPeriod (headscale's 12h). */
export const SSH_CHECK_PERIOD_DEFAULT_MS = 12 * 3600_000;

/**
 * checkPeriods holds the checkPeriod of each compiled `check` action, in milliseconds (0: "always", a check at
 * every connection). It stays off the action itself: devices are sent the action, and the period is the server's.
 */
const checkPeriods = new WeakMap<SSHAction, number>();

/** sshCheckPeriodMs is the checkPeriod of a compiled `check` action in milliseconds; undefined for any other action. */
export function sshCheckPeriodMs(action: SSHAction): number | undefined {
  return checkPeriods.get(action);
}

function checkAction(rule: SshRuleSpec): SSHAction {
  const action: SSHAction = { holdAndDelegate: 'https://unused' + CHECK_HOLD_URL };
  const cp = rule.checkPeriod;
  checkPeriods.set(action, cp === null ? SSH_CHECK_PERIOD_DEFAULT_MS : cp === 'always' ? 0 : Math.round(parseGoDuration(cp) * 1000));
  return action;
}

/** SshPre is one ssh rule resolved once per context: everything about it that does not depend on the node. */
interface SshPre {
  src: IPSet;
  users: Record<string, string>;
  localpartOf: Map<string, string>;
  hasLocalpart: boolean;
  /** byUser: the source principals of each owning user (the user's matching nodes' addresses, one per string). */
  byUser: Map<string, string[]>;
  userIds: string[];
  tagged: string[];
  selfDst: boolean;
  dst: IPSet | null;
}

/** SshRules compiles each node's SSH policy (tailcfg.SSHPolicy rules) on one context's tailnet. */
export class SshRules {
  private readonly pre = new Map<number, SshPre>();

  constructor(private readonly policy: Policy | null, private readonly nodes: NodeIndex, private readonly aliases: AliasResolver) {}

  /** sshPreOf resolves ssh rule `k` once per context: sources, principals by owning user, users, destinations. */
  private sshPreOf(k: number, rule: SshRuleSpec): SshPre {
    let p = this.pre.get(k);
    if (p) return p;
    const src = this.aliases.resolveAll(rule.src);
    const users = dict<string>();
    if (rule.users.includes('autogroup:nonroot')) users['*'] = '=';
    users['root'] = rule.users.includes('root') ? 'root' : '';
    // Only `localpart:*@domain` is a localpart pattern; other spellings are plain user names.
    const isLocalpart = (u: string) => u.startsWith('localpart:*@') && u.length > 12;
    for (const u of rule.users) {
      if (u !== 'root' && u !== 'autogroup:nonroot' && !isLocalpart(u)) users[u] = u;
    }
    const localpartDomains = rule.users.filter(isLocalpart).map((u) => u.slice(12).toLowerCase());
    const localpartOf = new Map<string, string>();
    if (localpartDomains.length) {
      for (const u of this.nodes.users) {
        const at = u.email?.lastIndexOf('@') ?? -1;
        if (!u.email || at < 0) continue;
        if (localpartDomains.includes(u.email.slice(at + 1).toLowerCase())) localpartOf.set(u.id, u.email.slice(0, at));
      }
    }
    // Principals are grouped by owning user (sorted ids), tagged sources last.
    const byUserAddrs = new Map<string, Addr[]>();
    const tagged: string[] = [];
    for (const x of this.nodes.nodesWithAddrIn(src)) {
      const n = this.nodes.infos[x]!;
      if (n.tagged) { tagged.push(...principalAddrs(n.addrs)); continue; }
      if (!n.node.userId) continue;
      const l = byUserAddrs.get(n.node.userId);
      if (l) l.push(...n.addrs); else byUserAddrs.set(n.node.userId, [...n.addrs]);
    }
    const byUser = new Map([...byUserAddrs].map(([uid, as]) => [uid, principalAddrs(as)]));
    const otherDst = rule.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:self'));
    p = {
      src, users, localpartOf, hasLocalpart: localpartDomains.length > 0, byUser, userIds: [...byUser.keys()].sort(compareIds), tagged,
      selfDst: rule.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:self'),
      dst: otherDst.length > 0 ? new IPSet(otherDst.flatMap((a) => (this.aliases.resolve(a) ?? new IPSet()).ranges)) : null,
    };
    this.pre.set(k, p);
    return p;
  }

  /** rulesFor compiles the node's SSH policy; null when the policy has no ssh section. */
  rulesFor(i: NodeInfo): SSHRule[] | null {
    const pol = this.policy;
    if (!pol || pol.ssh.length === 0) return null;
    const rules: SSHRule[] = [];
    pol.ssh.forEach((rule, k) => {
      const pre = this.sshPreOf(k, rule);
      if (pre.src.isEmpty()) return;
      const action: SSHAction = rule.action === 'accept'
        ? { accept: true, allowAgentForwarding: true, allowLocalPortForwarding: true, allowRemotePortForwarding: true }
        : checkAction(rule);
      const users = { ...pre.users };
      const principalsOf = (uid: string) => (pre.byUser.get(uid) ?? []).map((ip) => ({ nodeIP: ip }));
      const add = (principals: SSHPrincipal[], uid: string | null) => {
        const r: SSHRule = { principals, sshUsers: users, action };
        if (rule.acceptEnv.length > 0) r.acceptEnv = rule.acceptEnv;
        rules.push(r);
        const lp = uid === null ? undefined : pre.localpartOf.get(uid);
        if (lp !== undefined) {
          const r2: SSHRule = { principals, sshUsers: { [lp]: lp }, action };
          if (rule.acceptEnv.length > 0) r2.acceptEnv = rule.acceptEnv;
          rules.push(r2);
        }
      };
      if (pre.selfDst && !i.tagged && i.node.userId) {
        const p = principalsOf(i.node.userId);
        if (p.length > 0) add(p, i.node.userId);
      }
      if (pre.dst) {
        const dst = pre.dst;
        if (i.addrs.some((a) => dst.containsAddr(a))) {
          if (pre.hasLocalpart) {
            for (const uid of pre.userIds) add(principalsOf(uid), uid);
            if (pre.tagged.length > 0) add(pre.tagged.map((ip) => ({ nodeIP: ip })), null);
          } else {
            const all = [...pre.userIds.flatMap(principalsOf), ...pre.tagged.map((ip) => ({ nodeIP: ip }))];
            if (all.length > 0) add(all, null);
          }
        } else if (pre.hasLocalpart && i.addrs.some((a) => pre.src.containsAddr(a))) {
          // With localpart users, a source device also gets the rule for its own login.
          if (i.tagged) add(principalAddrs(i.addrs).map((ip) => ({ nodeIP: ip })), null);
          else if (i.node.userId && pre.byUser.has(i.node.userId)) add(principalsOf(i.node.userId), i.node.userId);
        }
      }
    });
    const isCheck = (r: SSHRule) => !!r.action.holdAndDelegate;
    return [...rules.filter(isCheck), ...rules.filter((r) => !isCheck(r))];
  }

  /** clear drops the resolved rules, which name the nodes before an extension. */
  clear(): void {
    this.pre.clear();
  }
}

function compareIds(a: string, b: string): number {
  const na = Number(a);
  const nb = Number(b);
  if (Number.isFinite(na) && Number.isFinite(nb)) return na - nb;
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * principalAddrs lists addresses for SSH principals: each address on its own, sorted (IPv4 first), without
 * repeats. A client reads a principal's nodeIP as one address, so a range or prefix (what IPSet.strings() makes of
 * adjacent devices) would match no connection and deny SSH to a user with two devices at neighbouring addresses.
 */
function principalAddrs(addrs: Addr[]): string[] {
  const sorted = [...addrs].sort((a, b) => (a.v6 !== b.v6 ? (a.v6 ? 1 : -1) : a.n < b.n ? -1 : a.n > b.n ? 1 : 0));
  return sorted.filter((a, k) => k === 0 || a.v6 !== sorted[k - 1]!.v6 || a.n !== sorted[k - 1]!.n).map(formatAddr);
}
