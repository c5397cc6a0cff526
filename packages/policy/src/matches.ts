import { parseHuJSON, PolicyError, toPlain, type JNode } from './hujson.js';
import { ALL, parseAddr, type Addr } from './ip.js';
import { parsePolicy, type Alias, type ParseOptions, type PortRange } from './policy.js';
import { TailnetContext, type Snapshot } from './compile.js';

/** RuleMatch is one access rule that applies to what a preview asked about: its sources and destinations as written, and its line. */
export interface RuleMatch {
  users: string[];
  ports: string[];
  lineNumber: number;
}

/** MatchQuery: the rules a user's devices are sources of (`user`), or the rules that let traffic reach an address and port (`ipport`). */
export type MatchQuery = { type: 'user'; user: string } | { type: 'ipport'; addr: Addr; port: number | null };

/**
 * parseIpPort reads "100.64.0.1:22", "[fd7a::1]:22" or a bare address (any port) for an ipport preview;
 * null when it is neither.
 */
export function parseIpPort(text: string): { addr: Addr; port: number | null } | null {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(text) ?? /^([^:]+):(\d+)$/.exec(text);
  const addr = parseAddr(m ? m[1]! : text);
  if (!addr) return null;
  const port = m ? Number(m[2]) : null;
  if (port !== null && (port < 1 || port > 65535)) return null;
  return { addr, port };
}

/** ruleNodes are the `acls` entries of the policy text, in order, as parsed nodes (for their lines and words as written). */
function ruleNodes(root: JNode): JNode[] {
  if (root.kind !== 'object') return [];
  const acls = root.entries.find((e) => e.key === 'acls')?.value;
  return acls?.kind === 'array' ? acls.items : [];
}

/** words are the strings of a rule's list field as written. */
function words(rule: JNode, key: string): string[] {
  const v = rule.kind === 'object' ? rule.entries.find((e) => e.key === key)?.value : undefined;
  return v?.kind === 'array' ? v.items.map((i) => String(toPlain(i))) : [];
}

const inPorts = (ports: PortRange[], port: number | null) => port === null || ports.some((p) => p.First <= port && port <= p.Last);

/**
 * previewMatches answers Tailscale's "preview rule matches": which of a proposed policy's access rules apply to a
 * user (a source naming one of the user's devices, or everyone) or to an address and port (a destination
 * covering both), resolved against the live tailnet. Throws PolicyError (with line and column) for a policy that
 * does not parse.
 */
export function previewMatches(text: string, snapshot: Snapshot, query: MatchQuery, opts: ParseOptions = {}): RuleMatch[] {
  const policy = parsePolicy(text, opts);
  const nodes = ruleNodes(parseHuJSON(text));
  const ctx = new TailnetContext(policy, snapshot);
  const covers = (a: Alias, addrs: Addr[]) => a.kind === 'wildcard' || addrs.some((x) => (ctx.resolve(a) ?? ALL).containsAddr(x));
  let addrs: Addr[];
  if (query.type === 'user') {
    const user = snapshot.users.find((u) => u.name === query.user || u.email === query.user);
    if (!user) throw new PolicyError(`previewFor: no user ${JSON.stringify(query.user.slice(0, 80))} in the tailnet`);
    addrs = ctx.infos.filter((i) => !i.tagged && i.node.userId === user.id).flatMap((i) => i.addrs);
  } else {
    addrs = [query.addr];
  }
  const out: RuleMatch[] = [];
  (policy.acls ?? []).forEach((rule, i) => {
    const hit = query.type === 'user'
      ? rule.src.some((a) => covers(a, addrs))
      : rule.dst.some((d) => covers(d.alias, addrs) && inPorts(d.ports, query.port));
    if (!hit) return;
    const node = nodes[i];
    out.push({ users: node ? words(node, 'src') : [], ports: node ? words(node, 'dst') : [], lineNumber: node?.pos.line ?? 0 });
  });
  return out;
}
