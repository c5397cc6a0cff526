import { randomBytes } from 'node:crypto';
import type { AwilixContainer } from 'awilix';
import type { HeadwayConfig } from '@headway/core';

/**
 * INSTANCE_HEADER names, on every /health answer, the running server that gave it: a
 * random id drawn at each start, so a server can tell whether a URL reaches itself
 * (directly, or through a proxy or balancer) rather than another server.
 */
export const INSTANCE_HEADER = 'headway-instance';

/** newInstanceId draws the id a server puts on its /health answers. */
export function newInstanceId(): string {
  return randomBytes(16).toString('hex');
}

/** ReachResult says whether a URL reached the server, and why not when it did not. */
export interface ReachResult {
  reaches: boolean;
  why: string;
}

/**
 * urlReachesInstance asks GET <url>/health whether `url` reaches the server whose
 * instance id is `instanceId`. Refused, timed out, not a Headway server, or another
 * one: false, with the reason.
 */
export async function urlReachesInstance(url: string, instanceId: string, timeoutMs = 5000): Promise<ReachResult> {
  const health = `${url.replace(/\/+$/, '')}/health`;
  try {
    const res = await fetch(health, { signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel();
    const answered = res.headers.get(INSTANCE_HEADER);
    if (answered === instanceId) return { reaches: true, why: `${health} answered as this server` };
    return { reaches: false, why: answered ? `another Headway server answers ${health}` : `${health} answered HTTP ${res.status}, not as this server` };
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    return { reaches: false, why: `nothing answered ${health} (${cause?.code ?? cause?.message ?? (err as Error).message})` };
  }
}

/**
 * serverUrlReachesThis asks whether a started server's server_url reaches it: `headway
 * serve` checks this once listening before it warns that server_url names another port.
 */
export function serverUrlReachesThis(server: { config: HeadwayConfig; container: AwilixContainer }, timeoutMs?: number): Promise<ReachResult> {
  return urlReachesInstance(server.config.server_url, server.container.resolve<string>('instanceId'), timeoutMs);
}
