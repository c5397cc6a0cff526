import { badField, shown } from '../errors.js';
import { canonicalPrefix, isExitRoute } from '@headway/policy/ip';

/** approvedRouteSet is an approved-routes list as stored: canonical, sorted, and either exit route approving both. */
export function approvedRouteSet(routes: string[], field = 'routes'): string[] {
  const set = new Set<string>();
  const trimmed = routes.map((x) => x.trim());
  // [""] once cleared every approval as [] does: a blank from a script's empty variable would drop a node's routes.
  if (trimmed.some((x) => x === '')) throw badField(field, 'an entry is empty; send an empty list to remove every approved route');
  for (const c of canonicalRoutes(trimmed, field)) {
    if (isExitRoute(c)) { set.add('0.0.0.0/0'); set.add('::/0'); } else set.add(c);
  }
  return [...set].sort();
}

/** canonicalRoutes checks each entry is a CIDR prefix and returns it in canonical form. */
export function canonicalRoutes(routes: string[], field = 'routes'): string[] {
  return routes.map((r) => {
    const c = r.includes('/') ? canonicalPrefix(r) : undefined;
    if (!c) throw badField(field, `expected CIDR prefixes such as 10.0.0.0/24, found ${shown(r)}`);
    return c;
  });
}

/**
 * sanitizeHostname turns what a device reports into a DNS label the way Tailscale
 * does: first label only, lower case, anything outside [a-z0-9-] becomes '-',
 * no leading or trailing '-', at most 63 characters; empty becomes `node`.
 */
export function sanitizeHostname(hostname: string): string {
  const first = hostname.trim().split('.')[0] ?? '';
  let s = first.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/-+/g, '-');
  s = s.replace(/^-+/, '').slice(0, 63).replace(/-+$/, '');
  return s || 'node';
}

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** checkDnsLabel explains why a name is not a valid DNS label, or returns undefined. */
export function checkDnsLabel(name: string): string | undefined {
  if (!name) return 'must not be empty';
  if (name.length > 63) return `must be at most 63 characters, found ${name.length}`;
  if (!LABEL.test(name)) return `must be a DNS label: lower-case letters, digits and '-', not starting or ending with '-'; found ${shown(name)}`;
  return undefined;
}

/** uniqueName appends -1, -2, ... to `base` until `taken` says no (kept within 63 characters). */
export function uniqueName(base: string, taken: (name: string) => boolean): string {
  if (!taken(base)) return base;
  for (let i = 1; ; i++) {
    const suffix = `-${i}`;
    const name = base.slice(0, 63 - suffix.length).replace(/-+$/, '') + suffix;
    if (!taken(name)) return name;
  }
}

const USER = /^[a-zA-Z0-9][a-zA-Z0-9._@+-]{0,62}$/;

export function checkUserName(name: string): string | undefined {
  if (!name) return 'must not be empty';
  if (!USER.test(name)) return `must be 1-63 characters of letters, digits, '.', '_', '-', '+' or '@', starting with a letter or digit; found ${shown(name)}`;
  return undefined;
}

const TAG = /^tag:[a-zA-Z0-9][a-zA-Z0-9-_.]*$/;

export function checkTag(tag: string): string | undefined {
  return TAG.test(tag) ? undefined : `expected tag:<name> (letters, digits, '-', '_', '.'), found ${shown(tag)}`;
}

/**
 * GivenNames counts the nodes in memory per given name (names are unique in
 * storage; a count stays safe if not) and holds the names proposed by
 * registrations still in their transaction, so concurrent joins of one hostname
 * propose different names.
 */
export class GivenNames {
  private readonly counts = new Map<string, number>();
  private readonly claimed = new Set<string>();

  add(name: string): void { this.counts.set(name, (this.counts.get(name) ?? 0) + 1); }

  drop(name: string): void {
    const c = this.counts.get(name) ?? 0;
    if (c <= 1) this.counts.delete(name);
    else this.counts.set(name, c - 1);
  }

  claim(name: string): void { this.claimed.add(name); }
  unclaim(name: string): void { this.claimed.delete(name); }

  /** taken says whether a node other than the one named `own` holds the name, or a registration proposed it. */
  taken(name: string, own?: string): boolean {
    if (this.claimed.has(name)) return true;
    // Counted by name: scanning every node would cost O(N) per join, O(N²) per burst.
    const count = this.counts.get(name) ?? 0;
    if (count === 0) return false;
    return !(count === 1 && own === name);
  }
}
