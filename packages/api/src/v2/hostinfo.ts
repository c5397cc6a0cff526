import { z } from 'zod';
import type { Node } from '@headway/core';

/*
 * What a device reports about itself (its Hostinfo, validated when it arrived), read
 * for the fields Tailscale's API derives from it: OS, client version, shields-up,
 * Tailscale SSH, distribution and connectivity.
 */

interface NetInfo {
  MappingVariesByDestIP?: boolean; HairPinning?: boolean; WorkingIPv6?: boolean; WorkingUDP?: boolean;
  UPnP?: boolean; PMP?: boolean; PCP?: boolean; PreferredDERP?: number; DERPLatency?: Record<string, number>;
}

/** DeviceHostinfo is the part of a stored Hostinfo /api/v2 shows. */
export interface DeviceHostinfo {
  OS?: string; IPNVersion?: string; ShieldsUp?: boolean; SSH_HostKeys?: unknown[];
  Distro?: string; DistroVersion?: string; DistroCodeName?: string; NetInfo?: NetInfo;
}

/** hostinfoOf is a node's stored Hostinfo, or {} before its device sent one. */
export const hostinfoOf = (n: Node): DeviceHostinfo => (n.hostinfo ?? {}) as DeviceHostinfo;

export const ConnectivitySchema = z.object({
  endpoints: z.array(z.string()).meta({ description: 'Addresses the device was last reachable at' }),
  derp: z.string().meta({ description: 'The home DERP region, `derp-<region id>`; empty when unknown' }),
  mappingVariesByDestIP: z.boolean(),
  latency: z.record(z.string(), z.object({ preferred: z.boolean().optional(), latencyMs: z.number() })).meta({ description: 'By DERP region id: the lowest latency the device measured' }),
  clientSupports: z.object({ hairPinning: z.boolean(), ipv6: z.boolean(), pcp: z.boolean(), pmp: z.boolean(), udp: z.boolean(), upnp: z.boolean() }),
}).meta({ id: 'V2ClientConnectivity', description: 'fields=all: what the device last reported of its network' });

export const DistroSchema = z.object({ name: z.string(), version: z.string(), codeName: z.string() })
  .meta({ id: 'V2Distro', description: 'fields=all: the Linux distribution, when the device reports one' });

/** clientConnectivity is what the device last reported of its network; null before it reported any. */
export function clientConnectivity(n: Node): z.input<typeof ConnectivitySchema> | null {
  const net = hostinfoOf(n).NetInfo;
  if (!net) return null;
  const latency: Record<string, { preferred?: boolean; latencyMs: number }> = {};
  // DERPLatency is keyed "<region>-v4" / "<region>-v6" in seconds; a region shows its lower one.
  for (const [key, seconds] of Object.entries(net.DERPLatency ?? {})) {
    const region = key.split('-')[0]!;
    const ms = Math.round(seconds * 1e6) / 1e3;
    const known = latency[region];
    if (!known || ms < known.latencyMs) latency[region] = { latencyMs: ms, ...(Number(region) === net.PreferredDERP ? { preferred: true } : {}) };
  }
  return {
    endpoints: n.endpoints,
    derp: net.PreferredDERP ? `derp-${net.PreferredDERP}` : '',
    mappingVariesByDestIP: net.MappingVariesByDestIP === true,
    latency,
    clientSupports: {
      hairPinning: net.HairPinning === true, ipv6: net.WorkingIPv6 === true, pcp: net.PCP === true,
      pmp: net.PMP === true, udp: net.WorkingUDP === true, upnp: net.UPnP === true,
    },
  };
}

/** distroOf is the Linux distribution a device reports; null for one that reports none. */
export function distroOf(n: Node): z.input<typeof DistroSchema> | null {
  const h = hostinfoOf(n);
  if (!h.Distro) return null;
  return { name: h.Distro, version: h.DistroVersion ?? '', codeName: h.DistroCodeName ?? '' };
}
