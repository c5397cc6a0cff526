import type { CompiledNode } from './compile.js';
import type { Alias, Grant, NodeAttr, Policy } from './policy.js';

/** CAP_DRIVE is the peer capability a Taildrive grant carries (tailcfg.PeerCapabilityTaildrive). */
export const CAP_DRIVE = 'tailscale.com/cap/drive';

/**
 * DriveRule is one Taildrive grant from outside the policy (a drive adapter),
 * with its ends already turned into policy aliases: `src` may access the
 * `shares` of `dst` with `access`.
 */
export interface DriveRule {
  src: Alias[];
  dst: Alias[];
  shares: string[];
  access: 'ro' | 'rw';
}

/**
 * drivePolicy is the policy that says exactly what `rules` say, in the policy's
 * own terms: `drive:share` on every destination, `drive:access` on every
 * source, and a grant whose only app capability is `tailscale.com/cap/drive`
 * `{shares, access}`. Compiling it with the ordinary compiler makes adapter
 * grants indistinguishable on the wire from policy-written ones (CapMap
 * attributes, CapGrant rules, the drive-sharer companion rule). The base
 * policy lends its groups, hosts and autoApprovers, so `group:` sources and
 * approved routes resolve as they do in the policy; nothing else is copied.
 */
export function drivePolicy(base: Policy | null, rules: readonly DriveRule[]): Policy {
  const grants: Grant[] = [];
  const nodeAttrs: NodeAttr[] = [];
  for (const r of rules) {
    grants.push({ src: r.src, dst: r.dst, ip: [], app: { [CAP_DRIVE]: [{ shares: [...r.shares], access: r.access }] }, via: [] });
    nodeAttrs.push({ target: r.dst, attr: ['drive:share'], app: null }, { target: r.src, attr: ['drive:access'], app: null });
  }
  return {
    groups: base?.groups ?? {},
    hosts: base?.hosts ?? {},
    tagOwners: base?.tagOwners ?? {},
    // An empty (non-null) acls list: without it the compiler would add the allow-all default.
    acls: [],
    grants,
    ssh: [],
    nodeAttrs,
    autoApprovers: base?.autoApprovers ?? { routes: {}, exitNode: [] },
    tests: [],
    sshTests: [],
    randomizeClientPort: false,
  };
}

/**
 * mergeCompiled adds what drive rules compile to (`extra`) to a node's policy
 * result: their filter rules after the policy's, their CapMap attributes
 * (payloads appended when both have one), and their peers after the policy's.
 */
export function mergeCompiled(base: CompiledNode, extra: CompiledNode): CompiledNode {
  const capMap: Record<string, unknown[] | null> = { ...base.capMap };
  for (const [k, v] of Object.entries(extra.capMap)) {
    const had = capMap[k];
    if (!(k in capMap)) capMap[k] = v;
    else if (Array.isArray(had) && Array.isArray(v)) capMap[k] = [...had, ...v];
    else if (had === null && Array.isArray(v)) capMap[k] = v;
  }
  const peers = [...base.peers];
  const seen = new Set(peers);
  for (const p of extra.peers) if (!seen.has(p)) { seen.add(p); peers.push(p); }
  return { ...base, packetFilter: [...base.packetFilter, ...extra.packetFilter], capMap, peers };
}
