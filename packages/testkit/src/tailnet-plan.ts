/**
 * tailnet-plan generates the realistic tailnet of `npm run bench`: ten users in four groups, a fifth of
 * the devices tagged with one of five tags, a few subnet routers, and 50-100 acls and grants mixing groups, tags,
 * users, autogroup:member/self and hosts, so that every device sees a strict subset of the tailnet. Everything is
 * derived from a seed, so the driver, every worker and the property tests rebuild the very same plan on their own
 * instead of shipping it over IPC. Pure code with no dependency, so core's tests can use it too.
 */

/**
 * PlanRng is mulberry32: small, seedable, and the same in every process. It is also the seeded random source of
 * the property tests in core and policy, so a failing run replays from its seed.
 */
export class PlanRng {
  private s: number;
  constructor(seed: number) { this.s = seed >>> 0; }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let x = this.s;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number { return Math.floor(this.next() * n); }
  pick<T>(xs: readonly T[]): T { return xs[this.int(xs.length)]!; }
  chance(p: number): boolean { return this.next() < p; }
  /** subset keeps each element with probability 1/2. */
  subset<T>(xs: readonly T[]): T[] { return xs.filter(() => this.chance(0.5)); }
  /** some picks 1..max elements (with repeats dropped). */
  some<T>(xs: readonly T[], max: number): T[] {
    const n = 1 + this.int(max);
    return [...new Set(Array.from({ length: n }, () => this.pick(xs)))];
  }
}

/** PlanUser is one user of the plan; policies name users by email. */
export interface PlanUser { name: string; email: string }

/** DevicePlan says how device `index` joins: owned by a user (user set) or by its tags, advertising routes. */
export interface DevicePlan {
  index: number;
  hostname: string;
  /** user is the owning user's name; absent for a tagged device (owned by its tags). */
  user?: string;
  tags: string[];
  routes: string[];
}

/** TailnetPlan is the whole generated tailnet: users, devices and the policy text in force at the start. */
export interface TailnetPlan {
  seed: number;
  users: PlanUser[];
  devices: DevicePlan[];
  policy: string;
  /** rules counts acls plus grants in `policy`. */
  rules: number;
}

export const PLAN_DOMAIN = 'bench.example';
export const PLAN_TAGS = ['tag:web', 'tag:db', 'tag:ci', 'tag:monitor', 'tag:router'] as const;
/** PLAN_ROUTES are what the subnet routers advertise; each is served by two routers (one primary). */
export const PLAN_ROUTES = ['10.100.0.0/16', '10.101.0.0/24', '10.102.0.0/16'] as const;
const HOSTS: Record<string, string> = { 'corp-net': '10.100.0.0/16', vault: '10.100.7.10/32', lab: '10.101.0.0/24', dc: '10.102.0.0/16' };
/** ROUTERS is how many devices are subnet routers (tag:router), whatever the fleet size: "a few". */
const ROUTERS = 6;
const USERS = 10;
/** GROUPS: sales users belong to nothing else, so the policy change (sales may reach tag:ci) changes their peers. */
const GROUPS: Record<string, number[]> = {
  'group:eng': [0, 1, 2, 3],
  'group:ops': [3, 4, 5],
  'group:sales': [6, 7, 8],
  'group:admins': [0, 9],
};
const PORTS = ['22', '80', '443', '5432', '8080', '9090', '3000-3999', '*'];

function email(u: number): string { return `user${u}@${PLAN_DOMAIN}`; }

/** planUsers are the ten users every plan has, by name and email. */
export function planUsers(): PlanUser[] {
  return Array.from({ length: USERS }, (_, u) => ({ name: `user${u}`, email: email(u) }));
}

/** planDevices lays out `count` devices: every fifth is tagged, the first ROUTERS tagged ones are subnet routers. */
export function planDevices(count: number, seed: number): DevicePlan[] {
  const rng = new PlanRng(seed ^ 0x5eed);
  const out: DevicePlan[] = [];
  let routers = 0;
  for (let i = 0; i < count; i++) {
    const hostname = `bench-${i}`;
    if (i % 5 === 4) {
      if (routers < ROUTERS) {
        out.push({ index: i, hostname, tags: ['tag:router'], routes: [PLAN_ROUTES[routers % PLAN_ROUTES.length]!] });
        routers++;
        continue;
      }
      const first = rng.pick(PLAN_TAGS.slice(0, 4));
      const tags = [first];
      if (rng.chance(0.15)) {
        const second = rng.pick(PLAN_TAGS.slice(0, 4));
        if (second !== first) tags.push(second);
      }
      out.push({ index: i, hostname, tags: tags.sort(), routes: [] });
    } else {
      out.push({ index: i, hostname, user: `user${rng.int(USERS)}`, tags: [], routes: [] });
    }
  }
  return out;
}

/** Rule is one acl or grant as written in the policy. */
type Rule = { kind: 'acl'; src: string[]; dst: string[] } | { kind: 'grant'; src: string[]; dst: string[]; ip: string[] };

/** forbidden keeps sales users away from tag:ci until the policy change grants it. */
function forbidden(src: string, dstTag: string): boolean {
  if (dstTag !== 'tag:ci') return false;
  return src === 'group:sales' || src === 'autogroup:member' || GROUPS['group:sales']!.some((u) => src === email(u));
}

/** planRules draws 50-100 rules (the count depends on the seed) mixing every kind of source and destination. */
function planRules(seed: number): Rule[] {
  const rng = new PlanRng(seed ^ 0xac1);
  const groups = Object.keys(GROUPS);
  const tags = PLAN_TAGS.slice(0, 4);
  const rules: Rule[] = [
    { kind: 'acl', src: ['autogroup:member'], dst: ['autogroup:self:*'] },
    { kind: 'acl', src: ['group:admins'], dst: ['tag:monitor:*', 'tag:router:22'] },
    { kind: 'acl', src: ['tag:monitor'], dst: ['tag:web:9090', 'tag:db:9090'] },
    { kind: 'grant', src: ['autogroup:member'], dst: ['tag:web'], ip: ['tcp:80', 'tcp:443'] },
  ];
  const total = 50 + rng.int(51);
  while (rules.length < total) {
    const roll = rng.int(10);
    const port = rng.pick(PORTS);
    if (roll < 4) {
      const src = rng.pick(groups), tag = rng.pick(tags);
      if (forbidden(src, tag)) continue;
      rules.push({ kind: 'acl', src: [src], dst: [`${tag}:${port}`] });
    } else if (roll < 6) {
      const src = email(rng.int(USERS)), tag = rng.pick(tags);
      if (forbidden(src, tag)) continue;
      rules.push({ kind: 'acl', src: [src], dst: [`${tag}:${port}`] });
    } else if (roll < 7) {
      const a = rng.pick(tags), b = rng.pick(tags);
      rules.push({ kind: 'acl', src: [a], dst: [`${b}:${port}`] });
    } else if (roll < 8) {
      const host = rng.pick(Object.keys(HOSTS));
      rules.push({ kind: 'acl', src: [rng.pick(groups.filter((g) => g !== 'group:sales'))], dst: [`${host}:${port}`] });
    } else {
      const src = rng.pick(groups), tag = rng.pick(tags);
      if (forbidden(src, tag)) continue;
      rules.push({ kind: 'grant', src: [src], dst: [tag], ip: [port === '*' ? '*' : `tcp:${port}`] });
    }
  }
  return rules;
}

/** planRuleList is the rule list of policy `variant`; variant 1 is the "policy change" (see planPolicy). */
function planRuleList(seed: number, variant: 0 | 1): Rule[] {
  const rules = planRules(seed);
  if (variant === 1) {
    rules.push({ kind: 'acl', src: ['group:sales'], dst: ['tag:ci:8080'] });
    const r = rules[rules.length - 2]!;
    if (r.kind === 'acl') r.dst = r.dst.map((d) => d.replace(/:[^:]+$/, ':1-1023'));
  }
  return rules;
}

/**
 * planPolicy renders the policy; variant 1 is the "policy change" of the benchmark: sales may now reach tag:ci
 * (so sales devices and tag:ci devices gain each other) and one existing rule changes its ports.
 */
export function planPolicy(seed: number, variant: 0 | 1 = 0): { text: string; rules: number } {
  const rules = planRuleList(seed, variant);
  const policy = {
    groups: Object.fromEntries(Object.entries(GROUPS).map(([g, us]) => [g, us.map(email)])),
    tagOwners: Object.fromEntries(PLAN_TAGS.map((t) => [t, ['group:admins']])),
    hosts: HOSTS,
    autoApprovers: { routes: Object.fromEntries(PLAN_ROUTES.map((r) => [r, ['tag:router']])) },
    acls: rules.filter((r) => r.kind === 'acl').map((r) => ({ action: 'accept', src: r.src, dst: r.dst })),
    grants: rules.filter((r) => r.kind === 'grant').map((r) => ({ src: r.src, dst: r.dst, ip: (r as { ip: string[] }).ip })),
  };
  return { text: JSON.stringify(policy, null, 2), rules: rules.length };
}

/** HOST_ROUTE: the advertised route each host lies in, so a host destination reaches that route's routers. */
const HOST_ROUTE: Record<string, string> = { 'corp-net': '10.100.0.0/16', vault: '10.100.0.0/16', lab: '10.101.0.0/24', dc: '10.102.0.0/16' };

/** PeerBits is one bit per device index. */
export type PeerBits = Uint32Array;

export function bitsHas(b: PeerBits, i: number): boolean { return (b[i >>> 5]! & (1 << (i & 31))) !== 0; }

export function bitsCount(b: PeerBits): number {
  let c = 0;
  for (let w of b) { while (w) { w &= w - 1; c++; } }
  return c;
}

/**
 * expectedPeers is an independent, deliberately simple evaluator of who sees whom under a plan's policy (the
 * benchmark's convergence check; a policy compile cannot be the judge of itself, and the compile is quadratic with
 * a large constant). Two devices see each other when a rule has one in its sources and the other in its
 * destinations (either way round); autogroup:self joins a member's own devices; a host destination reaches the
 * routers (tag:router, auto-approved) of the route it lies in. Returns one bitset per device in [from, to).
 */
export function expectedPeers(devices: readonly DevicePlan[], seed: number, variant: 0 | 1, from = 0, to = devices.length): PeerBits[] {
  const n = devices.length, words = (n + 31) >>> 5;
  const member = (pred: (d: DevicePlan) => boolean): PeerBits => {
    const b = new Uint32Array(words);
    for (const d of devices) if (pred(d)) b[d.index >>> 5]! |= 1 << (d.index & 31);
    return b;
  };
  const cache = new Map<string, PeerBits>();
  const users = planUsers();
  const resolve = (alias: string): PeerBits => {
    let b = cache.get(alias);
    if (b) return b;
    if (alias.startsWith('group:')) {
      const names = new Set(GROUPS[alias]!.map((u) => users[u]!.name));
      b = member((d) => !d.tags.length && names.has(d.user!));
    } else if (alias.startsWith('tag:')) b = member((d) => d.tags.includes(alias));
    else if (alias === 'autogroup:member') b = member((d) => !d.tags.length);
    else if (alias.includes('@')) { const name = alias.split('@')[0]!; b = member((d) => !d.tags.length && d.user === name); }
    else if (alias in HOST_ROUTE) b = member((d) => d.tags.includes('tag:router') && d.routes.includes(HOST_ROUTE[alias]!));
    else throw new Error(`expectedPeers: alias ${alias} not understood`);
    cache.set(alias, b);
    return b;
  };
  const stripPort = (dst: string): string => dst.slice(0, dst.lastIndexOf(':'));
  const pairs: Array<{ src: PeerBits; dst: PeerBits }> = [];
  let selfRule = false;
  for (const r of planRuleList(seed, variant)) {
    const src = new Uint32Array(words);
    for (const a of r.src) src.forEach((_, w) => { src[w]! |= resolve(a)[w]!; });
    for (const raw of r.dst) {
      const alias = r.kind === 'acl' ? stripPort(raw) : raw;
      if (alias === 'autogroup:self') { selfRule = true; continue; }
      pairs.push({ src, dst: resolve(alias) });
    }
  }
  const byUser = new Map<string, PeerBits>();
  if (selfRule) for (const u of users) byUser.set(u.name, member((d) => !d.tags.length && d.user === u.name));
  const out: PeerBits[] = [];
  for (let i = from; i < to; i++) {
    const b = new Uint32Array(words);
    for (const p of pairs) {
      if (bitsHas(p.src, i)) for (let w = 0; w < words; w++) b[w]! |= p.dst[w]!;
      if (bitsHas(p.dst, i)) for (let w = 0; w < words; w++) b[w]! |= p.src[w]!;
    }
    const d = devices[i]!;
    if (selfRule && !d.tags.length) { const s = byUser.get(d.user!)!; for (let w = 0; w < words; w++) b[w]! |= s[w]!; }
    b[i >>> 5]! &= ~(1 << (i & 31));
    out.push(b);
  }
  return out;
}

/**
 * planRetag is the benchmark's tag change: a device with one tag (not a router, not tag:ci) and the tags it has in
 * round `round`, moved to another tag and, in the next round, back. undefined when no device fits.
 */
export function planRetag(devices: readonly DevicePlan[]): { device: DevicePlan; tagsAt(round: number): string[] } | undefined {
  const device = devices.find((d) => d.tags.length === 1 && d.tags[0] !== 'tag:router' && d.tags[0] !== 'tag:ci');
  if (!device) return undefined;
  const own = device.tags[0]!;
  const other = own === PLAN_TAGS[1] ? PLAN_TAGS[0] : PLAN_TAGS[1];
  return { device, tagsAt: (round) => [round % 2 === 0 ? other : own] };
}

/** planKey names the pre-auth key a device joins with: its user's, or the tagged key for its tag set. */
export function planKey(d: DevicePlan): string {
  return d.tags.length ? d.tags.join(',') : `user:${d.user}`;
}

/** planTailnet is the full plan for `count` devices. */
export function planTailnet(count: number, seed = 1): TailnetPlan {
  const { text, rules } = planPolicy(seed);
  return { seed, users: planUsers(), devices: planDevices(count, seed), policy: text, rules };
}

/** SnapshotLike has the shape of @headway/policy's Snapshot (testkit does not depend on the policy package). */
export interface SnapshotLike {
  users: Array<{ id: string; name: string; email?: string }>;
  nodes: Array<{ id: string; name: string; userId?: string; tags: string[]; ipv4?: string; ipv6?: string; availableRoutes: string[]; approvedRoutes: string[]; online?: boolean }>;
}

/**
 * planSnapshot presents the plan to the policy compiler with node id = device index and made-up tailnet addresses
 * (visibility depends on users, tags and routes, not on which 100.64/10 address a device got), so expected peer
 * sets can be computed before a single device has joined. `override` replaces one device's plan (a tag change).
 */
export function planSnapshot(plan: Pick<TailnetPlan, 'users' | 'devices'>, override?: DevicePlan): SnapshotLike {
  const userIds = new Map(plan.users.map((u, i) => [u.name, String(i + 1)]));
  return {
    users: plan.users.map((u, i) => ({ id: String(i + 1), name: u.name, email: u.email })),
    nodes: plan.devices.map((orig) => {
      const d = override && override.index === orig.index ? override : orig;
      const i = d.index, a = i + 1;
      return {
        id: String(i), name: d.hostname, userId: d.tags.length ? undefined : userIds.get(d.user!), tags: d.tags,
        ipv4: `100.${64 + ((a >> 16) & 63)}.${(a >> 8) & 255}.${a & 255}`, ipv6: `fd7a:115c:a1e0::${a.toString(16)}`,
        availableRoutes: d.routes, approvedRoutes: [], online: true,
      };
    }),
  };
}
