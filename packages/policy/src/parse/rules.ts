import type { JNode, Pos } from '../hujson.js';
import { IPSet, parsePrefix } from '../ip.js';
import type { AclRule, Alias, Grant, NodeAttr, Policy, PolicyTest, PortRange, SshPolicyTest } from '../policy.js';
import { parseAlias, parseGrantIP, parsePortList, parseProto, splitDst } from './aliases.js';
import type { NameChecks } from './names.js';
import { actionHint, attempt, capMap, err, expectObject, fields, present, str, strList } from './reader.js';

/**
 * The policy's rule sections other than ssh (parse/ssh.ts): acls, grants, nodeAttrs, autoApprovers and the two
 * test lists. Each reader is handed its section's node (present, not null) once the definitions (groups, hosts,
 * tagOwners) are read, and runs every independent piece in attempt().
 */

export function readAcls(aclsNode: JNode, pol: Policy, names: NameChecks): AclRule[] {
  const { nearTag, checkSource, checkAlias } = names;
  return attempt(() => {
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

export function readGrants(grantsNode: JNode, pol: Policy, names: NameChecks): Grant[] {
  const { nearTag, checkSource, checkAlias } = names;
  return attempt(() => {
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

/**
 * readNodeAttrs reads nodeAttrs; `unenforced` hears of what an entry asks that Headway does not do
 * (Funnel, ipPool), each a sentence for policy warnings.
 */
export function readNodeAttrs(naNode: JNode, names: NameChecks, unenforced: (warning: string) => void = () => undefined): NodeAttr[] {
  const { checkTag, checkAlias } = names;
  return attempt(() => {
    if (naNode.kind !== 'array') err('nodeAttrs must be a list', naNode.pos);
    return naNode.items.map((item, k) => attempt(() => {
      const f = fields(item, 'nodeAttrs entry', ['target', 'attr', 'app', 'ipPool']);
      const where = `nodeAttrs entry ${k + 1} (line ${item.pos.line})`;
      if (f.has('ipPool')) unenforced(`${where} has ipPool, which Headway does not apply: its devices keep their addresses from prefixes`);
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
      const attr = strList(f.get('attr'), 'attr');
      if (attr.includes('funnel')) unenforced(`${where} grants funnel, which Headway does not provide: nothing on the internet reaches these devices through it (the attribute is still sent, as headscale sends it)`);
      return { target, attr, app: capMap(f.get('app'), 'app') };
    }, null)).filter(present);
  }, []);
}

/** readAutoApprovers fills pol.autoApprovers from its section. */
export function readAutoApprovers(aaNode: JNode, pol: Policy): void {
  attempt(() => {
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
}

export function readTests(testsNode: JNode): PolicyTest[] {
  return attempt(() => {
    if (testsNode.kind !== 'array') err('tests must be a list', testsNode.pos);
    return testsNode.items.map((item) => attempt(() => {
      const f = fields(item, 'test', ['src', 'srcPostureAttrs', 'proto', 'accept', 'deny']);
      const protoNode = f.get('proto');
      const proto = protoNode ? parseProto(protoNode.kind === 'number' ? protoNode.text : str(protoNode, 'proto'), protoNode.pos) : null;
      return { src: str(f.get('src'), 'src'), proto, accept: strList(f.get('accept'), 'accept'), deny: strList(f.get('deny'), 'deny') };
    }, null)).filter(present);
  }, []);
}

export function readSshTests(sshTestsNode: JNode, pol: Policy, names: NameChecks): SshPolicyTest[] {
  const { nearTag } = names;
  return attempt(() => {
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
