import { PolicyError, parseHuJSON, toPlain, type JNode, type Pos } from './hujson.js';
import { IPSet, parsePrefix } from './ip.js';
import { Suggester } from './suggest.js';

/** Alias is one parsed policy name for a set of devices or addresses. */
export type Alias =
  | { kind: 'wildcard' }
  | { kind: 'user'; name: string }
  | { kind: 'userDomain'; domain: string }
  | { kind: 'group'; name: string }
  | { kind: 'tag'; name: string }
  | { kind: 'host'; name: string }
  | { kind: 'prefix'; text: string; set: IPSet }
  | { kind: 'autogroup'; name: string };

export interface PortRange {
  First: number;
  Last: number;
}

/** ProtoPorts is one `ip` entry of a grant: protocol numbers (null = Tailscale's default
 * TCP/UDP/ICMP set) and port ranges. */
export interface ProtoPorts {
  protos: number[] | null;
  ports: PortRange[];
}

export interface Grant {
  src: Alias[];
  dst: Alias[];
  ip: ProtoPorts[];
  app: Record<string, unknown[]> | null;
  via: string[];
}

export interface AclRule {
  action: 'accept';
  proto: number[] | null;
  src: Alias[];
  dst: { alias: Alias; ports: PortRange[] }[];
}

export interface SshRule {
  action: 'accept' | 'check';
  checkPeriod: string | null;
  src: Alias[];
  dst: Alias[];
  users: string[];
  acceptEnv: string[];
}

export interface NodeAttr {
  target: Alias[];
  attr: string[];
  app: Record<string, unknown[]> | null;
}

export interface PolicyTest {
  src: string;
  proto: number[] | null;
  accept: string[];
  deny: string[];
}

export interface SshPolicyTest {
  src: string;
  dst: string[];
  accept: string[];
  check: string[];
  deny: string[];
}

/** Policy is a parsed and validated access policy. */
export interface Policy {
  groups: Record<string, string[]>;
  hosts: Record<string, IPSet>;
  tagOwners: Record<string, string[]>;
  acls: AclRule[] | null;
  grants: Grant[] | null;
  ssh: SshRule[];
  nodeAttrs: NodeAttr[];
  autoApprovers: { routes: Record<string, Alias[]>; exitNode: Alias[] };
  tests: PolicyTest[];
  sshTests: SshPolicyTest[];
  randomizeClientPort: boolean;
  /**
   * unenforced names conditions the policy sets that Headway does not check (device posture), each a sentence for
   * policy warnings: a rule with such a condition applies to every device its other parts name.
   */
  unenforced?: string[];
}

const PROTOCOLS: Record<string, number> = {
  icmp: 1, igmp: 2, ipv4: 4, 'ip-in-ip': 4, tcp: 6, egp: 8, igp: 9, udp: 17,
  gre: 47, esp: 50, ah: 51, 'ipv6-icmp': 58, sctp: 132, fc: 133,
};

const AUTOGROUPS = new Set([
  'autogroup:internet', 'autogroup:member', 'autogroup:tagged', 'autogroup:self',
  'autogroup:nonroot', 'autogroup:danger-all',
]);

function err(reason: string, at?: Pos): never {
  throw new PolicyError(reason, at?.line ?? 0, at?.column ?? 0);
}

/** collected holds the errors checkPolicy gathers while it reads a policy; null outside. */
let collected: PolicyError[] | null = null;

/**
 * attempt runs one independent piece of validation (a section, an entry, one src or dst).
 * Under checkPolicy (parsePolicy too reads through it) a PolicyError is recorded and
 * `fallback` stands in, so the pieces after it are still checked and a broken file is
 * reported in one round; outside one the error propagates unchanged.
 */
function attempt<T>(fn: () => T, fallback: T): T {
  if (!collected) return fn();
  try {
    return fn();
  } catch (e) {
    if (!(e instanceof PolicyError)) throw e;
    collected.push(e);
    return fallback;
  }
}

const present = <T>(v: T | null): v is T => v !== null;

/** suggesting holds the suggestions of the policy being parsed (null outside a parse: each call then has its own). */
let suggesting: Suggester | null = null;

/** didYouMean is `; did you mean "x"?` naming the candidate a slip away from name, or ''. */
function didYouMean(kind: string, name: string, candidates: () => Iterable<string>, prefix = ''): string {
  return (suggesting ?? new Suggester()).didYouMean(kind, name, candidates, prefix);
}

/** ACCEPT_WORDS are what other firewalls call "accept"; DENY_WORDS, rules Tailscale policies do not have. */
const ACCEPT_WORDS = new Set(['allow', 'allowed', 'permit', 'pass', 'accepted', 'grant']);
const DENY_WORDS = new Set(['deny', 'denied', 'drop', 'reject', 'block', 'refuse']);

/**
 * actionHint says what an unsupported rule action should be: the valid action it was meant to be ("allow",
 * "Accept" and "acept" are "accept"), why there is no deny, or which actions there are.
 */
function actionHint(action: string, valid: string[]): string {
  const word = action.trim().toLowerCase();
  const quoted = valid.map((v) => JSON.stringify(v)).join(' or ');
  if (valid.includes(word)) return `; did you mean ${JSON.stringify(word)}? (actions are lower case)`;
  if (ACCEPT_WORDS.has(word)) return valid.includes('check') ? '; did you mean "accept"? (or "check", to ask for a recent login)' : '; did you mean "accept"?';
  if (DENY_WORDS.has(word)) return `; rules only allow (${quoted}), and what no rule allows is denied`;
  const near = didYouMean('action', word, () => valid);
  return near || `; use ${quoted}`;
}

type ObjNode = Extract<JNode, { kind: 'object' }>;

function expectObject(n: JNode, what: string): ObjNode {
  if (n.kind !== 'object') err(`${what} must be an object`, n.pos);
  return n;
}

/** fields checks an object against its allowed keys and returns them by name. */
function fields(n: JNode, what: string, allowed: string[]): Map<string, JNode> {
  const o = expectObject(n, what);
  const out = new Map<string, JNode>();
  for (const e of o.entries) {
    const known = attempt(() => {
      if (!allowed.includes(e.key)) err(`unknown field ${JSON.stringify(e.key)} in ${what}${didYouMean(`field of ${what}`, e.key, () => allowed)}`, e.keyPos);
      return true;
    }, false);
    if (known) out.set(e.key, e.value);
  }
  return out;
}

function str(n: JNode | undefined, what: string): string {
  if (!n) return '';
  if (n.kind !== 'string') err(`${what} must be a string`, n.pos);
  return n.value;
}

function strList(n: JNode | undefined, what: string): string[] {
  if (!n || n.kind === 'null') return [];
  if (n.kind !== 'array') err(`${what} must be a list of strings`, n.pos);
  return n.items.map((i) => str(i, what));
}

/**
 * dict is an object without a prototype for a policy's named entries: a name the policy writes is only ever its own
 * entry. With `{}`, a host named "constructor" or "toString" was found (Object.prototype's function, used as an
 * address set: every node's filter failed to compile), and an app capability named "__proto__" set the prototype.
 */
export function dict<T>(): Record<string, T> {
  return Object.create(null) as Record<string, T>;
}

function capMap(n: JNode | undefined, what: string): Record<string, unknown[]> | null {
  if (!n || n.kind === 'null') return null;
  const o = expectObject(n, what);
  const out = dict<unknown[]>();
  for (const e of o.entries) {
    if (e.value.kind !== 'array') err(`${what}[${JSON.stringify(e.key)}] must be a list`, e.value.pos);
    out[e.key] = e.value.items.map(toPlain);
  }
  return out;
}

/** parseAlias classifies one alias string; it does not check that names exist. */
export function parseAlias(text: string, at?: Pos): Alias {
  if (text === '*') return { kind: 'wildcard' };
  if (text.startsWith('autogroup:')) {
    if (!AUTOGROUPS.has(text)) {
      const hint = didYouMean('autogroup', text, () => AUTOGROUPS, 'autogroup:') || ` (Headway supports ${[...AUTOGROUPS].join(', ')})`;
      err(`autogroup ${JSON.stringify(text)} is not supported${hint}`, at);
    }
    return { kind: 'autogroup', name: text };
  }
  if (text.startsWith('group:')) return { kind: 'group', name: text };
  if (text.startsWith('tag:')) return { kind: 'tag', name: text };
  if (text.startsWith('user:*@')) return { kind: 'userDomain', domain: text.slice(7) };
  if (text.includes('@')) return { kind: 'user', name: text };
  const set = parsePrefix(text);
  if (set) return { kind: 'prefix', text, set: new IPSet([set]) };
  if (/^[0-9.:/a-fA-F]+$/.test(text) && /[.:]/.test(text)) err(`${JSON.stringify(text)}: invalid address`, at);
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(text)) err(`${JSON.stringify(text)}: invalid address`, at);
  return { kind: 'host', name: text };
}

/** parsePortList parses `*`, `N`, `N-M` and comma lists; messages follow Tailscale's. */
export function parsePortList(text: string): PortRange[] {
  if (text === '*') return [{ First: 0, Last: 65535 }];
  return text.split(',').map((part) => {
    const dash = part.indexOf('-');
    const a = dash < 0 ? part : part.slice(0, dash);
    const b = dash < 0 ? part : part.slice(dash + 1);
    if (!/^\d+$/.test(a)) throw new Error('invalid first integer');
    if (!/^\d+$/.test(b)) throw new Error('invalid last integer');
    const first = Number(a);
    const last = Number(b);
    if (first === 0) throw new Error("first port must be >0, or use '*' for wildcard");
    if (first > 65535 || last > 65535) throw new Error('port out of range');
    if (last < first) throw new Error('last port must be >= first port');
    return { First: first, Last: last };
  });
}

function parseProto(text: string, at?: Pos): number[] | null {
  if (text === '') return null;
  const lower = text.toLowerCase();
  if (lower in PROTOCOLS) return [PROTOCOLS[lower]!];
  if (/^[1-9]\d*$/.test(lower) && Number(lower) <= 255) return [Number(lower)];
  err(`proto ${JSON.stringify(text)} is not a known protocol name or number 1-255`, at);
}

function parseGrantIP(text: string, at: Pos): ProtoPorts {
  if (text === '*') return { protos: null, ports: [{ First: 0, Last: 65535 }] };
  let proto = '';
  let ports = text;
  if (text.includes(':')) {
    const parts = text.split(':');
    if (parts.length !== 2) err(`ip ${JSON.stringify(text)}: expected proto:ports`, at);
    proto = parts[0]!;
    ports = parts[1]!;
  }
  const protos = proto === '' ? null : parseProto(proto, at);
  try {
    return { protos, ports: parsePortList(ports) };
  } catch (e) {
    err(`port range ${JSON.stringify(ports)}: ${(e as Error).message}`, at);
  }
}

/** splitHostPort splits an ACL destination at its last colon (IPv6 literals may be bracketed). */
function splitDst(text: string, at: Pos): { alias: string; ports: string } {
  const i = text.lastIndexOf(':');
  if (i < 0) err(`dst=${JSON.stringify(text)}: missing port (use ${JSON.stringify(text + ':*')})`, at);
  let alias = text.slice(0, i);
  if (alias.startsWith('[') && alias.endsWith(']')) alias = alias.slice(1, -1);
  return { alias, ports: text.slice(i + 1) };
}

/** ParseOptions: tailnetDomains are the e-mail domains owned by the tailnet (for
 * `user:*@domain` and `localpart:*@domain`); unset means such domains are not checked. */
export interface ParseOptions {
  tailnetDomains?: string[];
  /** userNames are the live users' names, when known: `"alice:80"` with a user alice then
   * suggests `alice@` instead of only saying that no host alice exists. */
  userNames?: string[];
}

/**
 * checkPolicy validates a policy and returns every error it can reach, in the order met, instead of the first
 * (a broken HuJSON syntax still stops at its first error: nothing after it can be read reliably). The policy is
 * null when there is any error.
 */
export function checkPolicy(text: string, opts: ParseOptions = {}): { policy: Policy | null; errors: PolicyError[] } {
  const outer = { collected, suggesting };
  collected = [];
  suggesting = new Suggester();
  try {
    const policy = readPolicy(text, opts);
    const errors = uniqueErrors(collected);
    return { policy: errors.length ? null : policy, errors };
  } catch (e) {
    if (!(e instanceof PolicyError)) throw e;
    return { policy: null, errors: uniqueErrors([...collected, e]) };
  } finally {
    ({ collected, suggesting } = outer);
  }
}

function uniqueErrors(errors: PolicyError[]): PolicyError[] {
  const seen = new Set<string>();
  return errors.filter((e) => !seen.has(e.message) && !!seen.add(e.message));
}

/**
 * parsePolicy parses HuJSON policy text and validates it on its own (names, ports, autogroup placement); a policy
 * with errors throws one PolicyError listing all of them (see checkPolicy). Validation against a device list
 * (tests) is separate.
 */
export function parsePolicy(text: string, opts: ParseOptions = {}): Policy {
  const { policy, errors } = checkPolicy(text, opts);
  if (!policy) throw PolicyError.of(errors);
  return policy;
}

/**
 * readPolicy is the parser itself. Each independent piece of validation runs in attempt(), so under checkPolicy
 * an error in one rule, or one name in a rule, is recorded and the rest is still checked.
 */
function readPolicy(text: string, opts: ParseOptions): Policy {
  const root = parseHuJSON(text);
  const top = fields(root, 'policy', [
    'acls', 'grants', 'groups', 'hosts', 'tagOwners', 'autoApprovers', 'ssh', 'nodeAttrs',
    'tests', 'sshTests', 'randomizeClientPort', 'derpMap', 'disableIPv4', 'OneCGNATRoute',
    'postures', 'defaultSrcPosture', 'ipsets', 'attrConfig',
  ]);
  const pol: Policy = {
    groups: dict(), hosts: dict(), tagOwners: dict(), acls: null, grants: null, ssh: [], nodeAttrs: [],
    autoApprovers: { routes: dict(), exitNode: [] }, tests: [], sshTests: [], randomizeClientPort: false,
  };

  const groupsNode = top.get('groups');
  if (groupsNode && groupsNode.kind !== 'null') {
    for (const e of expectObject(groupsNode, 'groups').entries) {
      pol.groups[e.key] = attempt(() => {
        if (!e.key.startsWith('group:')) err(`groups: ${JSON.stringify(e.key)} must start with "group:"`, e.keyPos);
        const members = strList(e.value, `groups[${JSON.stringify(e.key)}]`);
        // A member is a user (or a group, refused below as recursive): a tag, address or autogroup in a group was
        // taken and matched nothing, in silence.
        const stray = members.find((m) => m === '*' || /^(tag|autogroup):/.test(m) || parsePrefix(m));
        if (stray !== undefined) err(`groups[${JSON.stringify(e.key)}]: ${JSON.stringify(stray)}: a group member must be a user (name@ or an e-mail address)`, e.value.pos);
        return members;
      }, []);
    }
    // Tailscale reports the last nested group it finds, so do the same.
    let nested: [string, string] | null = null;
    for (const [g, members] of Object.entries(pol.groups)) {
      for (const m of members) if (m.startsWith('group:')) nested = [g, m];
    }
    if (nested) attempt(() => err(`groups[${JSON.stringify(nested[0])}]: ${JSON.stringify(nested[1])}: group members cannot be recursive`, groupsNode.pos), undefined);
  }
  const hostsNode = top.get('hosts');
  if (hostsNode && hostsNode.kind !== 'null') {
    for (const e of expectObject(hostsNode, 'hosts').entries) {
      pol.hosts[e.key] = attempt(() => {
        const v = str(e.value, `hosts[${JSON.stringify(e.key)}]`);
        const r = parsePrefix(v);
        if (!r) err(`hosts[${JSON.stringify(e.key)}]: ${JSON.stringify(v)}: invalid address`, e.value.pos);
        return new IPSet([r]);
      }, new IPSet());
    }
  }
  const tagsNode = top.get('tagOwners');
  if (tagsNode && tagsNode.kind !== 'null') {
    for (const e of expectObject(tagsNode, 'tagOwners').entries) {
      pol.tagOwners[e.key] = attempt(() => {
        if (!/^tag:[A-Za-z]/.test(e.key)) {
          err(`tagOwners[${JSON.stringify(e.key)}]: tag names must start with a letter, after 'tag:'`, e.keyPos);
        }
        return strList(e.value, `tagOwners[${JSON.stringify(e.key)}]`);
      }, []);
    }
  }
  const rcp = top.get('randomizeClientPort');
  if (rcp) {
    attempt(() => {
      if (rcp.kind !== 'bool') err('randomizeClientPort must be true or false', rcp.pos);
      pol.randomizeClientPort = rcp.value;
    }, undefined);
  }
  // Sections Headway reads but does not act on keep the shapes Tailscale gives them: one of another type was
  // taken in silence (`"disableIPv4": 1`), as if it meant something.
  const shaped: Array<[string, 'bool' | 'string' | 'object' | 'list' | 'lists']> = [
    ['disableIPv4', 'bool'], ['OneCGNATRoute', 'string'], ['derpMap', 'object'], ['attrConfig', 'object'],
    ['defaultSrcPosture', 'list'], ['postures', 'lists'], ['ipsets', 'lists'],
  ];
  const defaultPosture = top.get('defaultSrcPosture');
  if (defaultPosture && defaultPosture.kind === 'array' && defaultPosture.items.length) {
    (pol.unenforced ??= []).push('defaultSrcPosture is set, and Headway does not check device posture: rules apply to every device in their sources');
  }
  for (const [key, shape] of shaped) {
    const n = top.get(key);
    if (!n || n.kind === 'null') continue;
    attempt(() => {
      if (shape === 'bool' && n.kind !== 'bool') err(`${key} must be true or false`, n.pos);
      if (shape === 'string' && n.kind !== 'string') err(`${key} must be a string`, n.pos);
      if (shape === 'object') expectObject(n, key);
      if (shape === 'list') strList(n, key);
      if (shape === 'lists') for (const e of expectObject(n, key).entries) strList(e.value, `${key}[${JSON.stringify(e.key)}]`);
    }, undefined);
  }

  // What a name the policy uses but does not define was likely meant to be: a name it does define, a slip away.
  // The defined names are all read by now: list them once.
  let tagNames: string[] | undefined;
  let groupNames: string[] | undefined;
  let hostNames: string[] | undefined;
  const nearTag = (name: string) => didYouMean('tag', name, () => (tagNames ??= Object.keys(pol.tagOwners)), 'tag:');
  const nearGroup = (name: string) => didYouMean('group', name, () => (groupNames ??= Object.keys(pol.groups).filter((g) => g.startsWith('group:'))), 'group:');
  const checkTag = (name: string, at: Pos | undefined, prefix: string) => {
    if (!(name in pol.tagOwners)) err(`${prefix}tag not found: ${JSON.stringify(name)}${nearTag(name)}`, at);
  };
  /** checkSource: autogroups that name no sender are refused on the src side of acls and grants. */
  const checkSource = (a: Alias, at: Pos | undefined) => {
    if (a.kind === 'autogroup' && a.name === 'autogroup:self') err('"autogroup:self" not valid on the src side of a rule', at);
    // The internet sends no packets a node's filter could name (every public range became a source).
    if (a.kind === 'autogroup' && a.name === 'autogroup:internet') err('autogroup:internet can only be used in ACL destinations', at);
  };
  const checkAlias = (a: Alias, at: Pos | undefined, side: string) => {
    if (a.kind === 'tag') checkTag(a.name, at, side === 'src' ? 'src=' : '');
    if (a.kind === 'host' && !(a.name in pol.hosts)) err(hostNotFound(a.name, () => (hostNames ??= Object.keys(pol.hosts)), opts.userNames), at);
    if (a.kind === 'group' && !(a.name in pol.groups)) err(`group ${JSON.stringify(a.name)} not found${nearGroup(a.name)}`, at);
  };

  const aclsNode = top.get('acls');
  if (aclsNode && aclsNode.kind !== 'null') {
    pol.acls = attempt(() => {
    if (aclsNode.kind !== 'array') err('acls must be a list', aclsNode.pos);
    return aclsNode.items.map((item) => attempt(() => {
      const f = fields(item, 'acl', ['action', 'src', 'dst', 'proto', 'ports', 'users']);
      attempt(() => {
        const action = str(f.get('action'), 'action');
        if (action !== 'accept') err(`action=${JSON.stringify(action)} is not supported${actionHint(action, ['accept'])}`, f.get('action')?.pos ?? item.pos);
      }, undefined);
      const src = strList(f.get('src'), 'src').map((s) => attempt(() => {
        const a = parseAlias(s, item.pos);
        checkSource(a, item.pos);
        checkAlias(a, item.pos, 'src');
        return a;
      }, null)).filter(present);
      const protoNode = f.get('proto');
      const proto = protoNode ? attempt(() => parseProto(protoNode.kind === 'number' ? protoNode.text : str(protoNode, 'proto'), protoNode.pos), null) : null;
      const dst = strList(f.get('dst'), 'dst').map((d) => attempt(() => {
        const { alias, ports: portText } = splitDst(d, item.pos);
        let ports: PortRange[];
        try {
          ports = parsePortList(portText);
        } catch (e) {
          err(`dst=${JSON.stringify(d)}: port range ${JSON.stringify(portText)}: ${(e as Error).message}`, item.pos);
        }
        const a = parseAlias(alias, item.pos);
        if (a.kind === 'tag' && !(a.name in pol.tagOwners)) err(`dst=${JSON.stringify(a.name)}: tag not found: ${JSON.stringify(a.name)}${nearTag(a.name)}`, item.pos);
        checkAlias(a, item.pos, 'dst');
        if (a.kind === 'autogroup' && a.name === 'autogroup:danger-all') err('cannot use autogroup:danger-all as a dst', item.pos);
        return { alias: a, ports };
      }, null)).filter(present);
      if (dst.some((d) => d.alias.kind === 'autogroup' && d.alias.name === 'autogroup:self')) attempt(() => checkSelfSources(src, item.pos, true), undefined);
      return { action: 'accept' as const, proto, src, dst };
    }, null)).filter(present);
    }, []);
  }

  const grantsNode = top.get('grants');
  if (grantsNode && grantsNode.kind !== 'null') {
    pol.grants = attempt(() => {
    if (grantsNode.kind !== 'array') err('grants must be a list', grantsNode.pos);
    return grantsNode.items.map((item, k) => attempt(() => {
      const f = fields(item, 'grant', ['src', 'dst', 'ip', 'app', 'via', 'srcPosture']);
      const posture = f.get('srcPosture');
      if (posture && posture.kind === 'array' && posture.items.length) {
        (pol.unenforced ??= []).push(`grant ${k + 1} (line ${item.pos.line}) has srcPosture, which Headway does not check: it applies to every device in its src`);
      }
      const src = strList(f.get('src'), 'src').map((s) => attempt(() => {
        const a = parseAlias(s, item.pos);
        checkSource(a, item.pos);
        checkAlias(a, item.pos, 'src');
        return a;
      }, null)).filter(present);
      const dst = strList(f.get('dst'), 'dst').map((d) => attempt(() => {
        const a = parseAlias(d, item.pos);
        if (a.kind === 'prefix' && (d === '0.0.0.0/0' || d === '::/0')) {
          err(`dst ${JSON.stringify(d)}: to allow all IP addresses, use "*" or "autogroup:internet"`, item.pos);
        }
        if (a.kind === 'autogroup' && a.name === 'autogroup:danger-all') err('cannot use autogroup:danger-all as a dst', item.pos);
        checkAlias(a, item.pos, 'dst');
        return a;
      }, null)).filter(present);
      const ipNode = f.get('ip');
      // Each entry on its own; an entry that is wrong is reported, and does not make the list "empty" below.
      const ipRead = ipNode && ipNode.kind === 'array'
        ? ipNode.items.map((i) => attempt(() => parseGrantIP(str(i, 'ip'), i.pos), null))
        : strList(ipNode, 'ip').map((s) => attempt(() => parseGrantIP(s, item.pos), null));
      const ip = ipRead.filter(present);
      // undefined: the app map itself is wrong (reported), so whether it is empty is not known.
      const appRead = attempt<Record<string, unknown[]> | null | undefined>(() => capMap(f.get('app'), 'app'), undefined);
      const app = appRead && Object.keys(appRead).length > 0 ? appRead : null;
      if (ipRead.length === 0 && appRead !== undefined && !app) attempt(() => err('ip and app can not both be empty', item.pos), undefined);
      if (app) {
        for (const name of Object.keys(app)) attempt(() => validateCapName(name, item.pos), undefined);
        if (dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:internet')) attempt(() => err('cannot use app grants with autogroup:internet', item.pos), undefined);
      }
      const via = strList(f.get('via'), 'via');
      for (const v of via) {
        attempt(() => {
          if (!v.startsWith('tag:')) err('via can only be a tag', item.pos);
          if (!(v in pol.tagOwners)) err(`tag ${JSON.stringify(v)} not found${nearTag(v)}`, item.pos);
        }, undefined);
      }
      if (dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:self')) attempt(() => checkSelfSources(src, item.pos, false), undefined);
      return { src, dst, ip, app, via };
    }, null)).filter(present);
    }, []);
  }

  const sshNode = top.get('ssh');
  if (sshNode && sshNode.kind !== 'null') {
    pol.ssh = attempt(() => {
      if (sshNode.kind !== 'array') err('ssh must be a list', sshNode.pos);
      return sshNode.items.map((item, k) => attempt(() => parseSshRule(item, k + 1, pol, opts, checkAlias), null)).filter(present);
    }, []);
  }

  const naNode = top.get('nodeAttrs');
  if (naNode && naNode.kind !== 'null') {
    pol.nodeAttrs = attempt(() => {
    if (naNode.kind !== 'array') err('nodeAttrs must be a list', naNode.pos);
    return naNode.items.map((item) => attempt(() => {
      const f = fields(item, 'nodeAttrs entry', ['target', 'attr', 'app', 'ipPool']);
      for (const pool of strList(f.get('ipPool'), 'ipPool')) {
        attempt(() => {
          const r = parsePrefix(pool);
          if (!r) err(`${JSON.stringify(pool)}: invalid address`, item.pos);
          if (IPSet.of('100.100.100.0/24', '100.115.92.0/23').overlapsRange(r)) err(`IPPool(${pool}): network within reserved range`, item.pos);
        }, undefined);
      }
      const target = strList(f.get('target'), 'target').map((t) => attempt(() => {
        const a = parseAlias(t, item.pos);
        if (a.kind === 'tag') checkTag(a.name, item.pos, '');
        else checkAlias(a, item.pos, 'target');
        if (a.kind === 'autogroup' && a.name === 'autogroup:self') err('internal server error', item.pos);
        return a;
      }, null)).filter(present);
      return { target, attr: strList(f.get('attr'), 'attr'), app: capMap(f.get('app'), 'app') };
    }, null)).filter(present);
    }, []);
  }

  const aaNode = top.get('autoApprovers');
  if (aaNode && aaNode.kind !== 'null') attempt(() => {
    const f = fields(aaNode, 'autoApprovers', ['routes', 'exitNode', 'services']);
    const routes = f.get('routes');
    if (routes && routes.kind !== 'null') {
      for (const e of expectObject(routes, 'autoApprovers.routes').entries) {
        attempt(() => {
          if (!parsePrefix(e.key)) err(`autoApprovers.routes: ${JSON.stringify(e.key)}: invalid prefix`, e.keyPos);
          pol.autoApprovers.routes[e.key] = strList(e.value, 'autoApprovers.routes').map((s) => attempt(() => parseAlias(s, e.value.pos), null)).filter(present);
        }, undefined);
      }
    }
    pol.autoApprovers.exitNode = attempt(() => strList(f.get('exitNode'), 'autoApprovers.exitNode').map((s) => attempt(() => parseAlias(s, aaNode.pos), null)).filter(present), []);
  }, undefined);

  const testsNode = top.get('tests');
  if (testsNode && testsNode.kind !== 'null') {
    pol.tests = attempt(() => {
    if (testsNode.kind !== 'array') err('tests must be a list', testsNode.pos);
    return testsNode.items.map((item) => attempt(() => {
      const f = fields(item, 'test', ['src', 'srcPostureAttrs', 'proto', 'accept', 'deny']);
      const protoNode = f.get('proto');
      const proto = protoNode ? parseProto(protoNode.kind === 'number' ? protoNode.text : str(protoNode, 'proto'), protoNode.pos) : null;
      return { src: str(f.get('src'), 'src'), proto, accept: strList(f.get('accept'), 'accept'), deny: strList(f.get('deny'), 'deny') };
    }, null)).filter(present);
    }, []);
  }
  const sshTestsNode = top.get('sshTests');
  if (sshTestsNode && sshTestsNode.kind !== 'null') {
    pol.sshTests = attempt(() => {
    if (sshTestsNode.kind !== 'array') err('sshTests must be a list', sshTestsNode.pos);
    return sshTestsNode.items.map((item) => attempt(() => {
      const f = fields(item, 'sshTest', ['src', 'srcPostureAttrs', 'dst', 'accept', 'check', 'deny']);
      const t = {
        src: str(f.get('src'), 'src'), dst: strList(f.get('dst'), 'dst'), accept: strList(f.get('accept'), 'accept'),
        check: strList(f.get('check'), 'check'), deny: strList(f.get('deny'), 'deny'),
      };
      for (const d of t.dst) {
        if (d === 'autogroup:internet' || (parsePrefix(d) && d.includes('/'))) err(`SSH tests dst contains disallowed element ${JSON.stringify(d)}`, item.pos);
        if (d.startsWith('tag:') && !(d in pol.tagOwners)) err(`SSH tests dst contains unknown tag ${JSON.stringify(d)}${nearTag(d)}`, item.pos);
      }
      for (const u of [...t.accept, ...t.check, ...t.deny]) if (u === '*') err('user "*" is not valid', item.pos);
      return t;
    }, null)).filter(present);
    }, []);
  }
  return pol;
}

/**
 * hostNotFound explains a bare name that is neither a host nor anything else: a user is
 * written with a trailing "@" (`alice@`), a common slip in `"alice:80"`. When the live
 * users are known and one has that name, the hint says so plainly; otherwise a host the
 * policy defines a slip away ("webservr" for "webserver") is named, then such a user.
 */
function hostNotFound(name: string, hosts: () => string[], userNames: string[] | undefined): string {
  const base = `host ${JSON.stringify(name)} not found`;
  if (userNames?.some((u) => u.toLowerCase() === name.toLowerCase())) return `${base}; did you mean the user "${name}@"?`;
  const host = didYouMean('host', name, hosts);
  if (host) return base + host;
  const user = userNames ? (suggesting ?? new Suggester()).closest('user', name, () => userNames) : undefined;
  if (user !== undefined) return `${base}; did you mean the user ${JSON.stringify(`${user}@`)}?`;
  return `${base} (define it under "hosts", or write "${name}@" for a user named ${name})`;
}

/** checkSelfSources: autogroup:self destinations need user-owned sources; ACLs (not
 * grants) also accept "*", which then means "the same user's devices". */
function checkSelfSources(src: Alias[], at: Pos, wildcardOk: boolean): void {
  for (const a of src) {
    const ok = (wildcardOk && a.kind === 'wildcard') || a.kind === 'user' || a.kind === 'group' || (a.kind === 'autogroup' && a.name === 'autogroup:member');
    if (!ok) err('autogroup:self can only be used with users, groups, or supported autogroups', at);
  }
}

const TAILSCALE_CAPS = new Set([
  'tailscale.com/cap/drive', 'tailscale.com/cap/relay', 'tailscale.com/cap/webui',
  'tailscale.com/cap/kubernetes', 'tailscale.com/cap/tsidp', 'tailscale.com/cap/secrets',
]);

function validateCapName(name: string, at: Pos): void {
  if (name.includes('://') || !/^[^/]+\.[^/]+\/.+/.test(name)) err('capability name must have the form {domain}/{path}', at);
  if (name.startsWith('tailscale.com/') && !TAILSCALE_CAPS.has(name)) err('capability name must not be in the tailscale.com domain', at);
}

const MAX_CHECK_SECONDS = 168 * 3600;

/** SSH_FIX is what an ssh rule refused by checkSshReach can be written as instead. */
const SSH_FIX = "(use autogroup:self for each user's own devices, or tag the devices others may reach)";

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

function parseSshRule(item: JNode, ruleNo: number, pol: Policy, opts: ParseOptions, checkAlias: (a: Alias, at: Pos | undefined, side: string) => void): SshRule {
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
