import { z } from 'zod';
import { HeadwayError } from '@headway/core';
import type { ApiDeps } from '../route.js';

/** Tailnet is the `{tailnet}` path parameter every tailnet-scoped route takes. */
export const Tailnet = z.string().meta({ description: 'The tailnet: "-" (the caller\'s) or its name (dns.base_domain)', examples: ['-'] });

/**
 * checkTailnet checks a path's tailnet: `-` (the caller's own, what clients send by default)
 * or this tailnet's name (dns.base_domain). Another name is a 404, as Tailscale answers
 * for a tailnet the credential does not belong to.
 */
export function checkTailnet(deps: ApiDeps, tailnet: string): void {
  if (tailnet === '-' || tailnet === tailnetName(deps)) return;
  throw new HeadwayError('not_found', `tailnet ${JSON.stringify(tailnet.slice(0, 80))} not found; use "-" or ${JSON.stringify(tailnetName(deps))}`);
}

/** tailnetName is the name /api/v2 knows this tailnet by: the MagicDNS base domain, or "-" without one. */
export function tailnetName(deps: ApiDeps): string {
  return deps.config.dns?.base_domain || '-';
}
