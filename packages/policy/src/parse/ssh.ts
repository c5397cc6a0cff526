import { PolicyError, type JNode, type Pos } from '../hujson.js';
import type { Alias, ParseOptions, SshRule } from '../policy.js';
import { parseAlias } from './aliases.js';
import type { NameChecks } from './names.js';
import { actionHint, attempt, err, fields, present, str, strList } from './reader.js';

/** The ssh section: one rule at a time (readSsh), who may reach whom (checkSshReach), and Go's durations (checkPeriod). */

const MAX_CHECK_SECONDS = 168 * 3600;

/** SSH_FIX is what an ssh rule refused by checkSshReach can be written as instead. */
const SSH_FIX = "(use autogroup:self for each user's own devices, or tag the devices others may reach)";

export function readSsh(sshNode: JNode, opts: ParseOptions, names: NameChecks): SshRule[] {
  return attempt(() => {
    if (sshNode.kind !== 'array') err('ssh must be a list', sshNode.pos);
    return sshNode.items.map((item, k) => attempt(() => parseSshRule(item, k + 1, opts, names.checkAlias), null)).filter(present);
  }, []);
}

/**
 * checkSshReach refuses an ssh rule that would let one identity start Tailscale SSH on another user's device.
 * Tailscale allows a tag (or autogroup:tagged) as dst from any src, autogroup:self only from users and groups,
 * and a user only from that same user; a dst that can hold several users' devices ("*", autogroup:member,
 * user:*@domain, a group) is refused outright, since src and dst would then be different users
 * (https://tailscale.com/kb/1337/policy-syntax#dst-1). A group is never "the same user": its members can change
 * without the policy changing (oidc.policy_groups). Two user names are the same user when they are spelled the
 * same, trailing @ aside, which is how the compiler looks them up.
 */
function checkSshReach(ruleNo: number, src: Alias[], srcTexts: string[], dst: Alias[], dstTexts: string[], at: Pos): void {
  const q = JSON.stringify;
  const userKey = (name: string) => (name.endsWith('@') ? name.slice(0, -1) : name);
  dst.forEach((d, k) => {
    const dt = dstTexts[k]!;
    if (d.kind === 'tag' || (d.kind === 'autogroup' && d.name === 'autogroup:tagged')) return;
    if (d.kind === 'autogroup' && d.name === 'autogroup:self') {
      const bad = src.findIndex((s) => !(s.kind === 'user' || s.kind === 'group' || s.kind === 'userDomain' || (s.kind === 'autogroup' && s.name === 'autogroup:member')));
      if (bad >= 0) err(`ssh rule ${ruleNo}: dst "autogroup:self" is only allowed from users and groups, not from ${q(srcTexts[bad])}`, at);
      return;
    }
    if (d.kind === 'user') {
      const bad = src.findIndex((s) => s.kind !== 'user' || userKey(s.name) !== userKey(d.name));
      if (bad >= 0) err(`ssh rule ${ruleNo}: dst ${q(dt)}: users in dst are only allowed from the same user, and src ${q(srcTexts[bad])} is not that user ${SSH_FIX}`, at);
      return;
    }
    const manyUsers = d.kind === 'wildcard' || d.kind === 'group' || d.kind === 'userDomain'
      || (d.kind === 'autogroup' && (d.name === 'autogroup:member' || d.name === 'autogroup:danger-all'));
    if (manyUsers) err(`ssh rule ${ruleNo}: dst ${q(dt)} is not allowed: it holds other users' devices, and a user's device accepts Tailscale SSH only from that same user ${SSH_FIX}`, at);
  });
}

/** parseGoDuration reads Go's time.Duration syntax (e.g. "12h30m"), in seconds. */
export function parseGoDuration(text: string): number {
  const m = /^([-+]?)((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+|0)$/.exec(text);
  if (!m) throw new PolicyError(`time: invalid duration ${JSON.stringify(text)}`);
  const unit: Record<string, number> = { ns: 1e-9, us: 1e-6, 'µs': 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
  let total = 0;
  for (const part of m[2]!.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) total += Number(part[1]) * unit[part[2]!]!;
  return m[1] === '-' ? -total : total;
}

/** formatGoDuration renders seconds like Go's Duration.String ("168h0m1s"). */
export function formatGoDuration(seconds: number): string {
  const neg = seconds < 0;
  let s = Math.abs(Math.round(seconds));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const body = h > 0 ? `${h}h${m}m${s}s` : m > 0 ? `${m}m${s}s` : `${s}s`;
  return (neg ? '-' : '') + body;
}

function parseSshRule(item: JNode, ruleNo: number, opts: ParseOptions, checkAlias: NameChecks['checkAlias']): SshRule {
  const f = fields(item, 'ssh rule', ['action', 'src', 'dst', 'users', 'checkPeriod', 'acceptEnv']);
  // Each part is checked on its own (attempt), so a rule with a bad action and an unknown group says both.
  // The hosted service trims whitespace around SSH rule strings.
  const action = attempt(() => {
    const a = str(f.get('action'), 'action').trim();
    if (a === '') err('action must be specified', item.pos);
    if (a !== 'accept' && a !== 'check') err(`${JSON.stringify(a)} is not a valid action${actionHint(a, ['accept', 'check'])}`, item.pos);
    return a;
  }, 'accept');
  const users = attempt(() => strList(f.get('users'), 'users').map((u) => u.trim()), null);
  if (users && users.length === 0) attempt(() => err('users must be specified', item.pos), undefined);
  for (const u of users ?? []) {
    if (u === '' || u === '*') attempt(() => err(`user ${JSON.stringify(u)} is not valid`, item.pos), undefined);
  }
  const knownDomain = (d: string, prefix: string) => {
    // Only checkable when the caller says which domains belong to the tailnet.
    if (opts.tailnetDomains && !opts.tailnetDomains.includes(d)) err(`${prefix}${d} is not associated with this Tailnet and cannot be used in user:*@<domain> expressions`, item.pos);
  };
  for (const u of users ?? []) {
    if (!u.startsWith('localpart:')) continue;
    const rest = u.slice('localpart:'.length);
    if (!rest.startsWith('*@')) continue;
    const d = rest.slice(2);
    attempt(() => {
      if (d === '*') err(`* is not associated with this Tailnet and cannot be used in user:*@<domain> expressions`, item.pos);
      if (d !== d.toLowerCase()) err(`PASSKEY is not associated with this Tailnet and cannot be used in user:*@<domain> expressions`, item.pos);
      if (d !== '') knownDomain(d, '');
    }, undefined);
  }
  const srcTexts = attempt(() => strList(f.get('src'), 'src').map((s) => s.trim()), []);
  const src = srcTexts.map((s) => attempt(() => {
    const a = parseAlias(s, item.pos);
    if (a.kind === 'userDomain') knownDomain(a.domain, '[ssh] ');
    checkAlias(a, item.pos, 'src');
    return a;
  }, null));
  const dstTexts = attempt(() => strList(f.get('dst'), 'dst'), []);
  const dst = dstTexts.map((d) => attempt(() => {
    const a = parseAlias(d.trim(), item.pos);
    if (a.kind === 'host' || a.kind === 'prefix') err(`invalid dst ${JSON.stringify(d)}`, item.pos);
    checkAlias(a, item.pos, 'dst');
    return a;
  }, null));
  // Who may reach whom is only judged when every src and dst could be read.
  const srcOk = src.filter(present);
  const dstOk = dst.filter(present);
  if (srcOk.length === src.length && dstOk.length === dst.length) {
    attempt(() => checkSshReach(ruleNo, srcOk, srcTexts, dstOk, dstTexts.map((d) => d.trim()), item.pos), undefined);
  }
  const checkPeriod = attempt(() => {
    const cp = f.get('checkPeriod');
    if (!cp || cp.kind === 'null') return null;
    const period = str(cp, 'checkPeriod');
    if (period !== 'always') {
      const secs = parseGoDuration(period);
      if (secs < 0) err(`checkPeriod ${formatGoDuration(secs)} must be a positive duration`, cp.pos);
      if (secs > MAX_CHECK_SECONDS) err(`checkPeriod ${formatGoDuration(secs)} is above the max (168h)`, cp.pos);
    }
    return period;
  }, null);
  const acceptEnv = attempt(() => {
    const env = strList(f.get('acceptEnv'), 'acceptEnv');
    if (env.some((e) => e === '')) err('acceptEnv values cannot be empty', item.pos);
    return env;
  }, []);
  return { action: action as 'accept' | 'check', checkPeriod, src: srcOk, dst: dstOk, users: users ?? [], acceptEnv };
}
