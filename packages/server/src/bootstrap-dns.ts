import { lookup } from 'node:dns/promises';
import type { DerpMap } from '@headway/control';

/** BOOTSTRAP_DNS_TTL_MS: answers are reused this long, so a flood of requests costs no more than one lookup per name. */
export const BOOTSTRAP_DNS_TTL_MS = 60_000;
/** BOOTSTRAP_DNS_TIMEOUT_MS bounds one name's lookup; a name not resolved in time is left out, as a failed one is. */
export const BOOTSTRAP_DNS_TIMEOUT_MS = 5_000;

/** Resolve returns a name's addresses (IPv4 and IPv6), or rejects. */
export type Resolve = (name: string) => Promise<string[]>;

const systemResolve: Resolve = async (name) => (await lookup(name, { all: true, verbatim: true })).map((a) => a.address);

/** relayHostNames lists the HostName of every node of every region of a DERP map, once each. */
export function relayHostNames(map: DerpMap): string[] {
  const names = new Set<string>();
  for (const region of Object.values(map.Regions)) {
    for (const node of (region as { Nodes?: Array<{ HostName?: unknown }> }).Nodes ?? []) {
      if (typeof node.HostName === 'string' && node.HostName) names.add(node.HostName);
    }
  }
  return [...names];
}

/**
 * BootstrapDns answers /bootstrap-dns, the relay's fallback resolver: a Tailscale client whose own DNS fails
 * asks a DERP server for addresses, and here (as in headscale) the answer maps every relay host name of the
 * DERP map devices receive to the addresses this server resolves for it, `{ "name": ["ip", ...] }`. Names
 * that do not resolve are left out. The `q` parameter a client sends does not narrow the answer, as neither
 * headscale's relay nor Tailscale's derper narrow their published list by it.
 */
export class BootstrapDns {
  private cached?: { at: number; answer: Promise<Record<string, string[]>> };

  constructor(
    private readonly map: () => DerpMap,
    private readonly resolve: Resolve = systemResolve,
    private readonly now: () => number = Date.now,
  ) {}

  /** answer is the current name-to-addresses map, resolved at most once per BOOTSTRAP_DNS_TTL_MS. */
  answer(): Promise<Record<string, string[]>> {
    const now = this.now();
    if (!this.cached || now - this.cached.at >= BOOTSTRAP_DNS_TTL_MS) this.cached = { at: now, answer: this.build() };
    return this.cached.answer;
  }

  private async build(): Promise<Record<string, string[]>> {
    const names = relayHostNames(this.map());
    const found = await Promise.all(names.map((name) => this.within(name)));
    const out: Record<string, string[]> = {};
    names.forEach((name, i) => { if (found[i]?.length) out[name] = found[i]!; });
    return out;
  }

  private within(name: string): Promise<string[] | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), BOOTSTRAP_DNS_TIMEOUT_MS); });
    return Promise.race([this.resolve(name).catch(() => undefined), late]).finally(() => clearTimeout(timer));
  }
}
