import { parseHuJSON } from '../hujson.js';
import { IPSet, parsePrefix } from '../ip.js';
import type { ParseOptions, Policy } from '../policy.js';
import { nameChecks } from './names.js';
import { attempt, dict, err, expectObject, fields, str, strList } from './reader.js';
import { readAcls, readAutoApprovers, readGrants, readNodeAttrs, readSshTests, readTests } from './rules.js';
import { readSsh } from './ssh.js';

/**
 * readPolicy is the parser itself: the definitions first (groups, hosts, tagOwners and the sections Headway reads
 * but does not act on), then the rule sections, whose names are checked against those definitions. Each
 * independent piece of validation runs in attempt(), so under checkPolicy an error in one rule, or one name in a
 * rule, is recorded and the rest is still checked.
 */
export function readPolicy(text: string, opts: ParseOptions): Policy {
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
        // A member is a user (or a group, refused below as recursive): a tag, address or autogroup in a group
        // would match nothing, in silence.
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
  // Sections Headway reads but does not act on keep the shapes Tailscale gives them: one of another type
  // (`"disableIPv4": 1`) would otherwise be taken in silence, as if it meant something.
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

  // The defined names are all read by now.
  const names = nameChecks(pol, opts);
  /** section is the node of a rule section the policy sets (absent or null: not set). */
  const section = (key: string) => {
    const n = top.get(key);
    return n && n.kind !== 'null' ? n : undefined;
  };
  const acls = section('acls');
  if (acls) pol.acls = readAcls(acls, pol, names);
  const grants = section('grants');
  if (grants) pol.grants = readGrants(grants, pol, names);
  const ssh = section('ssh');
  if (ssh) pol.ssh = readSsh(ssh, opts, names);
  const nodeAttrs = section('nodeAttrs');
  if (nodeAttrs) pol.nodeAttrs = readNodeAttrs(nodeAttrs, names, (w) => (pol.unenforced ??= []).push(w));
  const autoApprovers = section('autoApprovers');
  if (autoApprovers) readAutoApprovers(autoApprovers, pol);
  const tests = section('tests');
  if (tests) pol.tests = readTests(tests);
  const sshTests = section('sshTests');
  if (sshTests) pol.sshTests = readSshTests(sshTests, pol, names);
  return pol;
}
