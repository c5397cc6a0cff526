import type { Pos } from '../hujson.js';
import { IPSet, parsePrefix } from '../ip.js';
import type { Alias, PortRange, ProtoPorts } from '../policy.js';
import { didYouMean, err } from './reader.js';

/** Aliases, ports and protocols: the small grammars inside a policy's strings. */

const PROTOCOLS: Record<string, number> = {
  icmp: 1, igmp: 2, ipv4: 4, 'ip-in-ip': 4, tcp: 6, egp: 8, igp: 9, udp: 17,
  gre: 47, esp: 50, ah: 51, 'ipv6-icmp': 58, sctp: 132, fc: 133,
};

const AUTOGROUPS = new Set([
  'autogroup:internet', 'autogroup:member', 'autogroup:tagged', 'autogroup:self',
  'autogroup:nonroot', 'autogroup:danger-all',
]);

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

export function parseProto(text: string, at?: Pos): number[] | null {
  if (text === '') return null;
  const lower = text.toLowerCase();
  if (lower in PROTOCOLS) return [PROTOCOLS[lower]!];
  if (/^[1-9]\d*$/.test(lower) && Number(lower) <= 255) return [Number(lower)];
  err(`proto ${JSON.stringify(text)} is not a known protocol name or number 1-255`, at);
}

/** parseGrantIP reads one `ip` entry of a grant: `*`, `ports` or `proto:ports`. */
export function parseGrantIP(text: string, at: Pos): ProtoPorts {
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

/** splitDst splits an ACL destination at its last colon (IPv6 literals may be bracketed). */
export function splitDst(text: string, at: Pos): { alias: string; ports: string } {
  const i = text.lastIndexOf(':');
  if (i < 0) err(`dst=${JSON.stringify(text)}: missing port (use ${JSON.stringify(text + ':*')})`, at);
  let alias = text.slice(0, i);
  if (alias.startsWith('[') && alias.endsWith(']')) alias = alias.slice(1, -1);
  return { alias, ports: text.slice(i + 1) };
}
