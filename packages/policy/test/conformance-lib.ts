import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ALL, IPSet, previewPolicy, type FilterRule, type PreviewResult, type Topology } from '../src/index.js';

/** ConformanceCase is one capture from the hosted control plane (see the data's README). */
export interface ConformanceCase {
  id: string;
  category: string;
  policy: string;
  accepted: boolean;
  api_error: string | null;
  topology: Topology;
  nodes: Record<string, {
    packet_filter_rules: FilterRule[] | null;
    ssh_rules: unknown[] | null;
    cap_map: Record<string, unknown> | null;
    self: { AllowedIPs?: string[]; PrimaryRoutes?: string[] };
    peers: { name: string; AllowedIPs?: string[]; PrimaryRoutes?: string[] }[] | null;
  }>;
}

export const CATEGORIES = ['acl', 'grant', 'ssh', 'nodeattrs', 'routes', 'policytest', 'sshtest'];

/**
 * conformanceDir finds shared/conformance/tailscale-saas by walking up from this file;
 * HEADWAY_CONFORMANCE_DIR names another place (a path that does not exist means "none").
 */
export function conformanceDir(): string | null {
  const fromEnv = process.env.HEADWAY_CONFORMANCE_DIR;
  if (fromEnv !== undefined) return existsSync(fromEnv) ? fromEnv : null;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let k = 0; k < 10; k++) {
    const candidate = join(dir, '..', 'shared', 'conformance', 'tailscale-saas');
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return null;
}

export function loadCases(root: string, category: string): ConformanceCase[] {
  const dir = join(root, category);
  return readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as ConformanceCase);
}

const DEFAULT_PROTOS = [6, 17, 1, 58];

function setOf(texts: string[]): IPSet {
  return texts.reduce((s, t) => s.union(t === '*' ? ALL : IPSet.of(t)), new IPSet());
}

/** filterMeaning reduces a filter to the allowed (proto, dst, ports) → sources map and the
 * granted (dst, capability, value) → sources map, so rule order and grouping don't matter. */
export function filterMeaning(rules: FilterRule[] | null): string[] {
  const packets = new Map<string, IPSet>();
  const caps = new Map<string, IPSet>();
  const add = (m: Map<string, IPSet>, k: string, s: IPSet) => m.set(k, (m.get(k) ?? new IPSet()).union(s));
  for (const r of rules ?? []) {
    const src = setOf(r.SrcIPs);
    for (const d of r.DstPorts ?? []) {
      const dst = d.IP === '*' ? ALL : IPSet.of(d.IP);
      for (const p of r.IPProto && r.IPProto.length > 0 ? r.IPProto : DEFAULT_PROTOS) {
        add(packets, `${p}|${dst.key()}|${d.Ports.First}-${d.Ports.Last}`, src);
      }
    }
    for (const cg of r.CapGrant ?? []) {
      for (const dst of cg.Dsts) {
        for (const [name, value] of Object.entries(cg.CapMap)) {
          add(caps, `cap|${IPSet.of(dst).key()}|${name}|${JSON.stringify(value ?? null)}`, src);
        }
      }
    }
  }
  return [...packets, ...caps].map(([k, v]) => `${k} <- ${v.key()}`).sort();
}

function sshMeaning(rules: unknown[] | null): string[] {
  return (rules ?? []).map((raw) => {
    const r = raw as { principals?: { nodeIP?: string }[]; sshUsers?: Record<string, string>; action?: Record<string, unknown>; acceptEnv?: string[] };
    const principals = [...new Set((r.principals ?? []).map((p) => p.nodeIP ?? '?'))].sort();
    const users = Object.entries(r.sshUsers ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
    const a = r.action ?? {};
    const action = a['holdAndDelegate'] ? 'check' : a['accept'] ? 'accept' : 'reject';
    return JSON.stringify([principals, users, action, [...(r.acceptEnv ?? [])].sort()]);
  }).sort();
}

const SERVICE_CAPS = new Set([
  'https://tailscale.com/cap/file-sharing', 'https://tailscale.com/cap/is-admin', 'https://tailscale.com/cap/is-owner',
  'https://tailscale.com/cap/ssh', 'https://tailscale.com/cap/tailnet-lock', 'probe-udp-lifetime', 'ssh-behavior-v1',
  'ssh-env-vars', 'store-appc-routes', 'tailnet-display-name', 'default-auto-update',
]);

function capMeaning(m: Record<string, unknown> | null): string {
  const entries = Object.entries(m ?? {}).filter(([k]) => !SERVICE_CAPS.has(k)).sort(([a], [b]) => (a < b ? -1 : 1));
  return JSON.stringify(entries.map(([k, v]) => [k, v ?? null]));
}

const sorted = (xs: string[] | undefined) => JSON.stringify([...(xs ?? [])].sort());

/** registrationOrderOf recovers the one fact the capture lacks: which router registered
 * first. The hosted service makes the earliest router primary, so routers the capture
 * shows as primary are listed first. */
export function registrationOrderOf(c: ConformanceCase): string[] {
  return Object.entries(c.nodes).filter(([, n]) => (n.self.PrimaryRoutes ?? []).length > 0).map(([name]) => name);
}

/** compareCase runs the preview and lists every difference from the capture (empty = pass). */
export function compareCase(c: ConformanceCase): { diffs: string[]; result: PreviewResult | null } {
  let result: PreviewResult;
  try {
    result = previewPolicy(c.policy, c.topology, { registrationOrder: registrationOrderOf(c) });
  } catch (e) {
    return { diffs: [`threw ${(e as Error).stack}`], result: null };
  }
  const diffs: string[] = [];
  if (result.accepted !== c.accepted) {
    diffs.push(`accepted: want ${c.accepted} (${c.api_error}), got ${result.accepted} (${result.error ?? ''})`);
    return { diffs, result };
  }
  if (!c.accepted) {
    if (c.api_error && !(result.error ?? '').includes(c.api_error)) diffs.push(`error: want ${JSON.stringify(c.api_error)}, got ${JSON.stringify(result.error)}`);
    return { diffs, result };
  }
  for (const [name, want] of Object.entries(c.nodes)) {
    const got = result.nodes[name];
    if (!got) { diffs.push(`${name}: missing`); continue; }
    const wf = filterMeaning(want.packet_filter_rules);
    const gf = filterMeaning(got.packet_filter_rules);
    if (JSON.stringify(wf) !== JSON.stringify(gf)) {
      diffs.push(`${name}: filter\n  want-only ${wf.filter((x) => !gf.includes(x)).join('\n            ')}\n  got-only  ${gf.filter((x) => !wf.includes(x)).join('\n            ')}`);
    }
    const ws = sshMeaning(want.ssh_rules);
    const gs = sshMeaning(got.ssh_rules);
    if (JSON.stringify(ws) !== JSON.stringify(gs)) diffs.push(`${name}: ssh\n  want ${ws.join('\n       ')}\n  got  ${gs.join('\n       ')}`);
    if (capMeaning(want.cap_map) !== capMeaning(got.cap_map)) diffs.push(`${name}: cap_map want ${capMeaning(want.cap_map)} got ${capMeaning(got.cap_map)}`);
    if (sorted(want.self.AllowedIPs) !== sorted(got.self.AllowedIPs)) diffs.push(`${name}: self AllowedIPs want ${sorted(want.self.AllowedIPs)} got ${sorted(got.self.AllowedIPs)}`);
    if (sorted(want.self.PrimaryRoutes) !== sorted(got.self.PrimaryRoutes)) diffs.push(`${name}: self PrimaryRoutes want ${sorted(want.self.PrimaryRoutes)} got ${sorted(got.self.PrimaryRoutes)}`);
    const wp = new Map((want.peers ?? []).map((p) => [p.name, p]));
    const gp = new Map(got.peers.map((p) => [p.name, p]));
    const wn = [...wp.keys()].sort();
    const gn = [...gp.keys()].sort();
    if (JSON.stringify(wn) !== JSON.stringify(gn)) diffs.push(`${name}: peers want ${wn} got ${gn}`);
    for (const [pn, w] of wp) {
      const g = gp.get(pn);
      if (!g) continue;
      if (sorted(w.AllowedIPs) !== sorted(g.AllowedIPs)) diffs.push(`${name}: peer ${pn} AllowedIPs want ${sorted(w.AllowedIPs)} got ${sorted(g.AllowedIPs)}`);
      if (sorted(w.PrimaryRoutes) !== sorted(g.PrimaryRoutes)) diffs.push(`${name}: peer ${pn} PrimaryRoutes want ${sorted(w.PrimaryRoutes)} got ${sorted(g.PrimaryRoutes)}`);
    }
  }
  return { diffs, result };
}
