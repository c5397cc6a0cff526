import { ALL, INTERNET, IPSet, TAILNET_WILDCARD, formatAddr, isExitRoute, parseAddr, parsePrefix, parseRangeText, parseSetText, type Addr } from './ip.js';
import { dict, type Alias, type Grant, type Policy, type PortRange, type ProtoPorts, type SshRule as SshRuleSpec } from './policy.js';

export interface PolicyUser {
  id: string;
  name: string;
  email?: string;
  /**
   * groups are the user's identity-provider groups, present only when the server
   * lets policy groups name them (oidc.policy_groups): `group:NAME` then also holds
   * every user whose groups include NAME.
   */
  groups?: string[];
}

export interface PolicyNode {
  id: string;
  /** name is the node's display name (unique in the tailnet). */
  name: string;
  /** userId is absent for tagged-only nodes. */
  userId?: string;
  tags: string[];
  ipv4?: string;
  ipv6?: string;
  /** availableRoutes are what the node advertises (Hostinfo.RoutableIPs). */
  availableRoutes: string[];
  /** approvedRoutes are what an admin approved, before autoApprovers. */
  approvedRoutes: string[];
  online?: boolean;
}

export interface Snapshot {
  users: PolicyUser[];
  nodes: PolicyNode[];
}

export interface NetPortRange {
  IP: string;
  Ports: PortRange;
}

export interface CapGrant {
  Dsts: string[];
  CapMap: Record<string, unknown[] | null>;
}

/** FilterRule is tailcfg.FilterRule as sent in MapResponse.PacketFilter. */
export interface FilterRule {
  SrcIPs: string[];
  DstPorts?: NetPortRange[];
  IPProto?: number[];
  CapGrant?: CapGrant[];
}

export interface SSHPrincipal {
  nodeIP: string;
}

export interface SSHAction {
  accept?: boolean;
  allowAgentForwarding?: boolean;
  allowLocalPortForwarding?: boolean;
  allowRemotePortForwarding?: boolean;
  holdAndDelegate?: string;
  sessionDuration?: number;
}

export interface SSHRule {
  principals: SSHPrincipal[];
  sshUsers: Record<string, string>;
  action: SSHAction;
  acceptEnv?: string[];
}

export interface CompiledNode {
  packetFilter: FilterRule[];
  sshPolicy: { rules: SSHRule[] } | null;
  capMap: Record<string, unknown[] | null>;
  /** peers: the ids of the nodes this one may see, in tailnet order (compilePolicy computes it on each read). */
  readonly peers: string[];
  approvedRoutes: string[];
  randomizeClientPort: boolean;
}

/** ALLOW_ALL is the filter used when there is no policy (or no acls/grants at all). */
export const ALLOW_ALL: FilterRule[] = [{ SrcIPs: ['*'], DstPorts: [{ IP: '*', Ports: { First: 0, Last: 65535 } }] }];

const CAP_DRIVE = 'tailscale.com/cap/drive';
const CAP_DRIVE_SHARER = 'tailscale.com/cap/drive-sharer';
const CAP_RELAY = 'tailscale.com/cap/relay';
const CAP_RELAY_TARGET = 'tailscale.com/cap/relay-target';
const COMPANIONS: [string, string][] = [[CAP_DRIVE, CAP_DRIVE_SHARER], [CAP_RELAY, CAP_RELAY_TARGET]];

/** CHECK_HOLD_URL is where clients are sent for `check` SSH rules; node ids are filled by the client. */
export const CHECK_HOLD_URL = '/machine/ssh/action/$SRC_NODE_ID/to/$DST_NODE_ID?local_user=$LOCAL_USER';

interface NodeInfo {
  /** idx is the node's position in the snapshot (tailnet order); every per-context index is keyed by it. */
  idx: number;
  node: PolicyNode;
  addrs: Addr[];
  /** addrPrefixes are the node's addresses as /32 and /128 prefixes (how CapGrant Dsts name them); filled
   * on first use (addressPrefixes), as only CapGrant rules need them. */
  addrPrefixes: string[];
  ips: IPSet;
  tagged: boolean;
  approved: string[];
  subnetRoutes: string[];
  subnetSet: IPSet;
  exitRoutes: string[];
}

interface CompiledGrant {
  rules: FilterRule[];
  self: { srcs: IPSet[]; ip: ProtoPorts[]; app: Record<string, unknown[]> | null } | null;
  via: { tags: string[]; dsts: IPSet[]; internet: boolean; ip: ProtoPorts[]; srcIPs: string[]; srcSet: IPSet } | null;
}

/**
 * Piece is one rule of a node's unmerged rule sequence (for every grant in order: its global rules, then its
 * autogroup:self rules, then its via rules), with `pos` its place in that sequence (see piecePos). Merging by
 * position lets a node's merged list be assembled from the shared global list plus its own few pieces.
 */
interface Piece { pos: number; rule: FilterRule }

function piecePos(grant: number, part: 0 | 1 | 2, k: number): number {
  return (grant * 3 + part) * 65536 + k;
}

/**
 * PreRule is one merged filter rule with its addresses parsed once per context: its sources, every DstPorts
 * entry and CapGrant Dst, the unions the peer and route checks need, and (lazily) which nodes hold an address
 * in each entry. The same PreRule serves every node whose merged list contains it.
 */
interface PreRule {
  rule: FilterRule;
  /** key is mergeRules' key (sources and protocols); null for a CapGrant rule, which is never merged. */
  key: string | null;
  firstPos: number;
  pieces: Piece[];
  srcs: IPSet;
  dsts: IPSet;
  entrySets: IPSet[];
  capSets: IPSet[][];
  capUnions: IPSet[];
  /** sig names the pieces merged into this rule (positions and rule objects): equal sigs, equal PreRules (see extend). */
  sig: string;
  /** hits maps a node index to the DstPorts entries (in order) holding one of its addresses; hitLists interns them. */
  hits?: Map<number, Hit>;
  hitLists?: Map<string, Hit>;
  /** hitAsks counts the nodes that asked for their entries before hits was built (see hitOf). */
  hitAsks?: number;
  /** plain: the rule narrowed to a node's entries, by those entries' text (see plainRule); one map per key in a
   * context (TailnetContext.plainBySource). */
  plain?: Map<string, FilterRule>;
  peerSets?: { S: NodeList; D: NodeList };
  /** hitsSeen and peerSetsSeen: how many nodes (the first of the tailnet) hits and peerSets reflect (see extend). */
  hitsSeen: number;
  peerSetsSeen: number;
  /** flat: entrySets as plain numbers, for hitIn's scan (made on first use, see flatOf). */
  flat?: FlatEntries;
}

/**
 * FlatEntries are a rule's DstPorts entries as number ranges: IPv4 as pairs of doubles (exact below 2^53), IPv6 as
 * four 32-bit words for the start and four for the end, each range with its entry's number. hitIn reads a node's
 * entries by one pass over typed arrays: testing each entry's IPSet in turn (a call, a binary search and bigint
 * compares per entry) was 30 of the ~170 ms a round of first maps spent compiling at 10,000 devices, whose rules
 * list thousands of entries each.
 */
interface FlatEntries { v4: Float64Array; v4e: Int32Array; v6: Uint32Array; v6e: Int32Array }

const W32 = 0xffffffffn;

function putWords(out: Uint32Array, at: number, n: bigint): void {
  out[at] = Number((n >> 96n) & W32);
  out[at + 1] = Number((n >> 64n) & W32);
  out[at + 2] = Number((n >> 32n) & W32);
  out[at + 3] = Number(n & W32);
}

/** cmpWords compares the 128-bit value in words[at..at+3] with (a0, a1, a2, a3). */
function cmpWords(w: Uint32Array, at: number, a0: number, a1: number, a2: number, a3: number): number {
  return w[at]! !== a0 ? w[at]! - a0 : w[at + 1]! !== a1 ? w[at + 1]! - a1 : w[at + 2]! !== a2 ? w[at + 2]! - a2 : w[at + 3]! - a3;
}

/**
 * V6_WORDS: an entry set's IPv6 ranges as FlatEntries words, kept per set (entry sets are parsed once per text across
 * contexts, see parseSetText), so a rule made again in an extension copies numbers instead of splitting bigints.
 * IPv4 ranges convert cheaply and are not kept: a kept pair per set cost every session a few hundred bytes.
 */
const V6_WORDS = new WeakMap<IPSet, Uint32Array>();

function v6Words(set: IPSet): Uint32Array | undefined {
  let w = V6_WORDS.get(set);
  if (w) return w;
  const v6s = set.ranges.filter((r) => r.v6);
  if (!v6s.length) return undefined;
  w = new Uint32Array(8 * v6s.length);
  v6s.forEach((r, k) => { putWords(w!, 8 * k, r.start); putWords(w!, 8 * k + 4, r.end); });
  V6_WORDS.set(set, w);
  return w;
}

function flatOf(p: PreRule): FlatEntries {
  if (p.flat) return p.flat;
  let n4 = 0, n6 = 0;
  for (const set of p.entrySets) for (const r of set.ranges) if (r.v6) n6++; else n4++;
  const f: FlatEntries = { v4: new Float64Array(2 * n4), v4e: new Int32Array(n4), v6: new Uint32Array(8 * n6), v6e: new Int32Array(n6) };
  let k4 = 0, k6 = 0;
  p.entrySets.forEach((set, e) => {
    for (const r of set.ranges) {
      if (r.v6) continue;
      f.v4[2 * k4] = Number(r.start);
      f.v4[2 * k4 + 1] = Number(r.end);
      f.v4e[k4++] = e;
    }
    const w = n6 ? v6Words(set) : undefined;
    if (!w) return;
    f.v6.set(w, 8 * k6);
    for (let k = 0; k < w.length >> 3; k++) f.v6e[k6++] = e;
  });
  return (p.flat = f);
}

/** entriesWith appends to `es`, in order, the entries of f holding address a (each at most once: a set's ranges are disjoint). */
function entriesWith(f: FlatEntries, a: Addr, es: number[]): void {
  if (!a.v6) {
    const x = Number(a.n), v = f.v4, n = f.v4e.length;
    for (let k = 0; k < n; k++) if (v[2 * k]! <= x && x <= v[2 * k + 1]!) es.push(f.v4e[k]!);
    return;
  }
  const a0 = Number((a.n >> 96n) & W32), a1 = Number((a.n >> 64n) & W32), a2 = Number((a.n >> 32n) & W32), a3 = Number(a.n & W32);
  const w = f.v6, n = f.v6e.length;
  for (let k = 0; k < n; k++) {
    if (cmpWords(w, 8 * k, a0, a1, a2, a3) <= 0 && cmpWords(w, 8 * k + 4, a0, a1, a2, a3) >= 0) es.push(f.v6e[k]!);
  }
}

/**
 * FilterMemo is a node's filter as compiled in one generation of a context (see packetFilter): the node as it was
 * then, its rule list, and for each rule of the filter, the merged rule that gave it.
 */
interface FilterMemo { info: NodeInfo; list: PreRule[]; generation: number; from: PreRule[]; out: FilterRule[] }

/**
 * ListMove: the merged rules a list of the next generation adds to one of the generation before (in list order),
 * those it drops, and among them the twins: an added rule of the same key (sources and protocols) and place as a
 * dropped one, whose DstPorts differ only in a few entries (see twinOf), found both ways (old to twin, twin to old).
 */
interface ListMove { added: PreRule[]; dropped: Set<PreRule>; twins: Map<PreRule, Twin>; twinned: Map<PreRule, Twin> }

/**
 * Twin: the rule that replaced a merged rule in the next generation, the addresses of the entries they differ in,
 * and (lazily, see movedBy) the nodes holding one of them, with how many nodes the context had then.
 */
interface Twin { old: PreRule; next: PreRule; changed: IPSet; moved?: Set<number>; movedSeen?: number }

/**
 * TWIN_MAX_CHANGED: a rule and its successor differing in more DstPorts entries than this are not twins (each node
 * is compiled against the successor then). A tag change or a join batch moves a few nodes' entries; a policy
 * change rewrites rules whole.
 */
const TWIN_MAX_CHANGED = 64;
/** TWIN_LOOKAHEAD: how far the entry diff of twins looks for where two DstPorts lists agree again. */
const TWIN_LOOKAHEAD = 8;

function sameEntry(x: NetPortRange, y: NetPortRange): boolean {
  return x.IP === y.IP && x.Ports.First === y.Ports.First && x.Ports.Last === y.Ports.Last;
}

/**
 * Scope is what a group of nodes adds to the global rules: the autogroup:self rules of one user (shared by all
 * its untagged nodes) or the via rules of one router. `list` is the merged rule list of its owners, `extras` the
 * entries of it that are not global PreRules.
 */
interface Scope {
  owners: number[];
  list: PreRule[];
  extras: PreRule[];
}

/** NodeList is a sorted list of node indices, OR-able into a bitset (as a bitset itself once it is large). */
class NodeList {
  private bits?: Uint32Array;
  constructor(readonly idx: Int32Array) {}
  get size(): number { return this.idx.length; }
  orInto(out: Uint32Array): void {
    if (this.idx.length > out.length) {
      if (this.bits?.length !== out.length) {
        this.bits = new Uint32Array(out.length);
        for (const x of this.idx) this.bits[x >>> 5]! |= 1 << (x & 31);
      }
      for (let w = 0; w < out.length; w++) out[w]! |= this.bits[w]!;
      return;
    }
    for (const x of this.idx) out[x >>> 5]! |= 1 << (x & 31);
  }
}

const EMPTY_LIST = new NodeList(new Int32Array(0));
/** NO_GRANT stands for a grant that compiles to nothing, so grant indices (and rule positions) never shift. */
const NO_GRANT: CompiledGrant = { rules: [], self: null, via: null };

/**
 * A context built to check a policy (policyWarnings builds one, with its peer index, for the whole tailnet) is
 * offered to the next compile of the same policy object on the same tailnet (NetworkView, when the policy is
 * installed, which happens in the same turn of the event loop): at 10,000 devices building both took 0.3 s each,
 * before any device heard of the change. Held weakly, so an offer nobody takes (a policy only checked) keeps
 * nothing alive.
 */
let offered: WeakRef<TailnetContext> | undefined;

/** offerContext makes ctx the context preparedContext hands out (replacing any offered before). */
export function offerContext(ctx: TailnetContext): void {
  offered = new WeakRef(ctx);
}

/**
 * preparedContext is the context offered for `policy` (the same object) if it was built on a tailnet equal to
 * `snapshot` in everything the compiler reads, and undefined otherwise. An offer is handed out once.
 */
export function preparedContext(policy: Policy | null, snapshot: Snapshot): TailnetContext | undefined {
  const ctx = offered?.deref();
  if (!ctx || ctx.policy !== policy) return undefined;
  offered = undefined;
  return sameTailnet(ctx.snapshot, snapshot) ? ctx : undefined;
}

const sameList = (a: readonly string[] | undefined, b: readonly string[] | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && a.length === b.length && a.every((x, k) => x === b[k]));

/** sameTailnet: the same users and nodes, in the same order, as the compiler reads them (for a node: samePlace, its name and whether it is online). */
function sameTailnet(a: Snapshot, b: Snapshot): boolean {
  if (a.users.length !== b.users.length || a.nodes.length !== b.nodes.length) return false;
  for (let k = 0; k < a.users.length; k++) {
    const u = a.users[k]!, v = b.users[k]!;
    if (u.id !== v.id || u.name !== v.name || u.email !== v.email || !sameList(u.groups, v.groups)) return false;
  }
  for (let k = 0; k < a.nodes.length; k++) {
    const n = a.nodes[k]!, m = b.nodes[k]!;
    if (!samePlace(n, m) || n.name !== m.name || n.online !== m.online) return false;
  }
  return true;
}

/** indexIn is where x is in the ascending list, or -1. */
function indexIn(list: Int32Array, x: number): number {
  let lo = 0, hi = list.length;
  while (lo < hi) { const mid = (lo + hi) >>> 1; if (list[mid]! < x) lo = mid + 1; else hi = mid; }
  return list[lo] === x ? lo : -1;
}

/** grantsOf is the policy's grants followed by its acls as grants (an acl's autogroup:self destinations last). */
function grantsOf(pol: Policy): Grant[] {
  const grants: Grant[] = [...(pol.grants ?? [])];
  for (const acl of pol.acls ?? []) {
    const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
    const ordered = [...acl.dst.filter((d) => !isSelf(d.alias)), ...acl.dst.filter((d) => isSelf(d.alias))];
    for (const d of ordered) {
      grants.push({ src: acl.src, dst: [d.alias], ip: [{ protos: acl.proto, ports: d.ports }], app: null, via: [] });
    }
  }
  return grants;
}
const V4_ALL = parseRangeText('0.0.0.0/0')!;
const V6_ALL = parseRangeText('::/0')!;

function sortedUnique(xs: ArrayLike<number>): Int32Array {
  const a = Int32Array.from(xs).sort();
  let n = 0;
  for (let k = 0; k < a.length; k++) if (k === 0 || a[k] !== a[k - 1]) a[n++] = a[k]!;
  return a.subarray(0, n);
}

/**
 * lowerBound is the first index at or after `from` whose key is not below x, in keys sorted ascending (IPv4 addresses
 * as numbers, IPv6 ones as bigints), for a key expected near `from`: steps of 1, 2, 4… until one passes x, then a
 * binary search within the last step (O(log distance), not O(log length)).
 */
function lowerBound<K extends number | bigint>(keys: readonly K[], x: K, from = 0): number {
  const n = keys.length;
  if (from >= n || keys[from]! >= x) return from;
  let lo = from, step = 1;
  while (lo + step < n && keys[lo + step]! < x) { lo += step; step *= 2; }
  let hi = Math.min(lo + step, n);
  lo++;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** bitsToList is the indices of a bitset's set bits, in order. */
function bitsToList(bits: Uint32Array): Int32Array {
  let count = 0;
  for (let w = 0; w < bits.length; w++) {
    let word = bits[w]!;
    while (word) { word &= word - 1; count++; }
  }
  const out = new Int32Array(count);
  let at = 0;
  for (let w = 0; w < bits.length; w++) {
    let word = bits[w]!;
    while (word) {
      const low = word & -word;
      out[at++] = w * 32 + 31 - Math.clz32(low);
      word ^= low;
    }
  }
  return out;
}

/** exitCover is the peer rule's test for a destination set reaching exit nodes: all of IPv4 or IPv6, or the
 * whole internet (see TailnetContext.buildPeerIndex). */
function exitCover(dsts: IPSet): boolean {
  return dsts.containsRange(V4_ALL) || dsts.containsRange(V6_ALL) || INTERNET.subsetOf(dsts);
}

const RULE_KEYS = new WeakMap<FilterRule, string>();
/** LIST_KEYS: a SrcIPs list joined, once per list (srcList gives every rule from the same sources one list). */
const LIST_KEYS = new WeakMap<readonly string[], string>();
function ruleKey(r: FilterRule): string {
  let k = RULE_KEYS.get(r);
  if (k === undefined) {
    let list = LIST_KEYS.get(r.SrcIPs);
    if (list === undefined) LIST_KEYS.set(r.SrcIPs, list = r.SrcIPs.join(','));
    k = `${list}|${(r.IPProto ?? []).join(',')}`;
    RULE_KEYS.set(r, k);
  }
  return k;
}

/**
 * PIECE_PORTS: a piece rule's DstPorts entries parsed and their union, once per rule object. A piece is merged in
 * every scope whose own rules share its key as well as in the global list, and parsing its entries (thousands for
 * a destination of every member) again for each was a tenth of an extension's cost at 10,000 devices.
 */
const PIECE_PORTS = new WeakMap<FilterRule, { entrySets: IPSet[]; dsts: IPSet }>();
function piecePorts(r: FilterRule): { entrySets: IPSet[]; dsts: IPSet } {
  let v = PIECE_PORTS.get(r);
  if (!v) {
    const entrySets = (r.DstPorts ?? []).map((d) => parseSetText(d.IP));
    v = { entrySets, dsts: new IPSet(entrySets.flatMap((x) => x.ranges)) };
    PIECE_PORTS.set(r, v);
  }
  return v;
}

/** RULE_IDS numbers rule objects, so a merged rule is named by the very pieces it was merged from (PreRule.sig). */
const RULE_IDS = new WeakMap<FilterRule, number>();
let nextRuleId = 0;
function ruleId(r: FilterRule): number {
  let id = RULE_IDS.get(r);
  if (id === undefined) { id = nextRuleId++; RULE_IDS.set(r, id); }
  return id;
}

/**
 * SRC_SETS holds, for a SrcIPs list rendered from a known set (IPSet.strings of a resolved source), that set:
 * merging then takes it instead of parsing the list back (thousands of addresses for autogroup:member).
 */
const SRC_SETS = new WeakMap<string[], IPSet>();
/** SRC_LISTS: the one SrcIPs list of each set, shared by every rule with those sources (rules are never modified). */
const SRC_LISTS = new WeakMap<IPSet, string[]>();
function srcList(set: IPSet): string[] {
  let out = SRC_LISTS.get(set);
  if (!out) {
    out = set.strings();
    SRC_SETS.set(out, set);
    SRC_LISTS.set(set, out);
  }
  return out;
}

/**
 * Hit is one entry list of a PreRule's hits (interned: nodes served by the same entries share it, see hitsOf) with
 * the rule narrowed to those entries (plainRule), made on first use. Every node the same entries serve gets the
 * same object, in this context and in every context extended from it: sessions then hold one shared rule, and a
 * session's filter update skips a rule by identity when it is the object the session was sent before
 * (filterUpdate). Nobody may modify it.
 */
interface Hit { es: number[]; rule?: FilterRule }
/** PLAIN_KEPT_MAX bounds how many narrowed forms of one rule (PreRule.plain) an extension keeps. */
const PLAIN_KEPT_MAX = 4096;

/** internHit is the one Hit of p for these entries (hitsOf and hitOf share them, and with them their rule objects). */
function internHit(p: PreRule, es: number[]): Hit {
  const lists = (p.hitLists ??= new Map());
  const key = es.join(',');
  let hit = lists.get(key);
  if (!hit) lists.set(key, hit = { es });
  return hit;
}

/** hitIn is node i's Hit of p read from p's entries one by one (undefined: none holds an address of i). */
function hitIn(p: PreRule, i: NodeInfo): Hit | undefined {
  const addrs = i.addrs.filter((a) => p.dsts.containsAddr(a));
  if (!addrs.length) return undefined;
  const f = flatOf(p);
  let es: number[] = [];
  entriesWith(f, addrs[0]!, es);
  for (let k = 1; k < addrs.length; k++) {
    // Each address's entries are in order; an entry holding two of them ('*', a large range) counts once.
    const more: number[] = [];
    entriesWith(f, addrs[k]!, more);
    if (more.length) es = Array.from(sortedUnique([...es, ...more]));
  }
  return es.length ? internHit(p, es) : undefined;
}

/** HITS_INDEX_AFTER: how many nodes read their entries of a rule one by one before its index is built (see hitOf). */
const HITS_INDEX_AFTER = 24;

function plainRule(p: PreRule, hit: Hit): FilterRule {
  let out = hit.rule;
  if (out) return out;
  const entries = p.rule.DstPorts!;
  const dsts = hit.es.map((e) => entries[e]!);
  // The same sources, protocols and entries are the same rule: take the object made before, by this rule or by
  // another of the same key (one it replaced in an extension, or a scope's), so unchanged filters stay equal by identity.
  const key = dsts.map((d) => `${d.IP} ${d.Ports.First}-${d.Ports.Last}`).join(',');
  const plain = (p.plain ??= new Map());
  out = plain.get(key);
  if (!out) {
    out = { ...p.rule, DstPorts: dsts };
    plain.set(key, out);
  }
  hit.rule = out;
  return out;
}

/** SshPre is one ssh rule resolved once per context: everything about it that does not depend on the node. */
interface SshPre {
  src: IPSet;
  users: Record<string, string>;
  localpartOf: Map<string, string>;
  hasLocalpart: boolean;
  /** byUser: the source principals of each owning user (the user's matching nodes' addresses, one per string). */
  byUser: Map<string, string[]>;
  userIds: string[];
  tagged: string[];
  selfDst: boolean;
  dst: IPSet | null;
}

/**
 * TailnetContext resolves a policy against one snapshot; build it once per snapshot. Everything that does not
 * depend on the node compiled is computed once here and indexed by node (issue 9): alias resolution, users by
 * name/email/id, nodes by user, tag and address, every rule's parsed addresses, and for the peer relation each
 * rule's source and destination node sets. Compiling one node then costs O(rules touching it + its output),
 * where it used to scan the tailnet for every rule (O(N·R) per node, O(N²·R) per tailnet).
 */
export class TailnetContext {
  readonly infos: NodeInfo[];
  readonly byId = new Map<string, NodeInfo>();
  /** effective is the policy the grants come from (a policy without acls or grants allows everything, see below). */
  private readonly effective: Policy | null;
  /** compiledGrants: the grants compiled and merged once, on first use (see grantsCompiled). */
  private compiledGrants?: { grants: CompiledGrant[] | null; globalList: PreRule[]; globalByKey: Map<string, PreRule> };

  private readonly usersByName = new Map<string, PolicyUser[]>();
  private readonly usersByEmail = new Map<string, PolicyUser[]>();
  private readonly userById = new Map<string, PolicyUser>();
  private readonly nodesByUser = new Map<string, NodeInfo[]>();
  private readonly nodesByTag = new Map<string, NodeInfo[]>();
  /** v4Keys are IPv4 addresses as numbers (exact: below 2^32), so that nodesWithAddrIn compares doubles, not bigints. */
  private readonly v4Keys: number[] = [];
  private readonly v4Idx: number[] = [];
  private readonly v6Keys: bigint[] = [];
  private readonly v6Idx: number[] = [];
  private readonly routers: NodeInfo[] = [];
  private readonly exitNodes: NodeInfo[] = [];
  private readonly resolved = new Map<string, IPSet | null>();
  /** resolvedAliases: the alias behind each key of `resolved` (extend grows the sets of those the new nodes join). */
  private readonly resolvedAliases = new Map<string, Alias>();
  private resolvedAll = new WeakMap<Alias[], IPSet>();
  /** resolvedLists: each alias list's sets (resolveList), once per list and extension. */
  private resolvedLists = new WeakMap<Alias[], (IPSet | null)[]>();
  private addrHits = new WeakMap<IPSet, Int32Array>();
  private subnetRouteStrings?: string[];
  private nodeScopes: (Scope | null | undefined)[];
  /** selfPieces: each user's autogroup:self rules, kept across extensions for users that gained or lost no node. */
  private readonly selfPieces = new Map<string, Piece[]>();
  /** grantSpecs are the policy's grants (acls as grants); grantMemo each one compiled, with the alias sets it used. */
  private grantSpecs?: Grant[];
  private readonly grantMemo: { src: (IPSet | null)[]; dst: (IPSet | null)[]; out: CompiledGrant }[] = [];
  /** reusable are the merged rules of the context before an extension, by PreRule.sig, until scopes are rebuilt. */
  private reusable?: Map<string, PreRule>;
  /**
   * filterMemo: per node index, its filter as last compiled (see packetFilter), from this generation (an extension
   * starts the next) or the one before; listMoves: per rule list of the generation before, what its successor adds
   * and drops.
   */
  private filterMemo: (FilterMemo | undefined)[] = [];
  private generation = 0;
  private listMoves = new WeakMap<PreRule[], Map<PreRule[], ListMove>>();
  /** twinsKept counts the rules a node's filter kept or skipped by a twin (see packetFilter), for tests. */
  twinsKept = 0;
  /** twinOfRule: per dropped rule, its twin among the rules that replaced it (null: none), once per pair (see twinOf). */
  private twinOfRule = new WeakMap<PreRule, { next: PreRule; twin: Twin | null }>();
  /**
   * plainBySource: per PreRule.key (sources and protocols), the rule narrowed to a node's entries, by those entries'
   * text (see plainRule), shared by every rule of that key in this context and kept over an extension for the keys
   * in use before it, so a rule that is merged again (a grant in it compiled again) hands its nodes the objects
   * they had when their entries did not change.
   */
  private plainBySource = new Map<string, Map<string, FilterRule>>();
  private readonly userScopes = new Map<string, Scope | null>();
  private readonly sshPre = new Map<number, SshPre>();
  private peerIndex?: { classOf: string[]; contrib: Map<string, NodeList>; classes: Map<string, { members: Int32Array; ids: string[] }> };

  /** snapshot is the tailnet the context answers for (extend replaces it with a larger one). */
  get snapshot(): Snapshot { return this.tailnet; }
  private tailnet: Snapshot;

  /** applyAutoApprovers=false takes approvedRoutes as final (e.g. a capture of a control
   * plane that already applied autoApprovers when the routes were advertised). */
  constructor(readonly policy: Policy | null, snapshot: Snapshot, readonly applyAutoApprovers = true) {
    this.tailnet = snapshot;
    this.infos = snapshot.nodes.map((n, idx) => nodeInfo(n, idx));
    this.nodeScopes = new Array<Scope | null | undefined>(this.infos.length);
    for (const i of this.infos) this.byId.set(i.node.id, i);
    for (const u of snapshot.users) {
      push(this.usersByName, u.name, u);
      if (u.email !== undefined) push(this.usersByEmail, u.email, u);
      if (!this.userById.has(u.id)) this.userById.set(u.id, u);
    }
    const v4: [bigint, number][] = [];
    const v6: [bigint, number][] = [];
    for (const i of this.infos) {
      if (!i.tagged && i.node.userId !== undefined) push(this.nodesByUser, i.node.userId, i);
      for (const t of new Set(i.node.tags)) push(this.nodesByTag, t, i);
      for (const a of i.addrs) (a.v6 ? v6 : v4).push([a.n, i.idx]);
    }
    for (const list of [v4, v6]) list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
    for (const [k, x] of v4) { this.v4Keys.push(Number(k)); this.v4Idx.push(x); }
    for (const [k, x] of v6) { this.v6Keys.push(k); this.v6Idx.push(x); }
    for (const i of this.infos) {
      i.approved = this.effectiveApproved(i);
      i.subnetRoutes = i.node.availableRoutes.filter((r) => !isExitRoute(r) && i.approved.includes(r));
      i.subnetSet = IPSet.of(...i.subnetRoutes);
      i.exitRoutes = i.node.availableRoutes.filter((r) => isExitRoute(r) && i.approved.includes(r));
      if (!i.subnetSet.isEmpty()) this.routers.push(i);
      if (i.exitRoutes.length > 0) this.exitNodes.push(i);
    }
    // A policy without acls or grants behaves like Tailscale's default `*` -> `*:*` rule,
    // whose sources are the tailnet ranges (not a literal "*").
    const effective = policy && policy.acls === null && policy.grants === null
      ? { ...policy, grants: [{ src: [{ kind: 'wildcard' as const }], dst: [{ kind: 'wildcard' as const }], ip: [{ protos: null, ports: [{ First: 0, Last: 65535 }] }], app: null, via: [] }] }
      : policy;
    this.effective = effective;
  }

  /**
   * extend brings the context up to `snapshot` when all that changed is nodes joining or nodes changing owner or
   * tags: the same users (the same array), every node the context knows still in its place, either unchanged in
   * what the policy reads (owner, tags, addresses, routes) or "moved" (same addresses, new owner or tags, and no
   * routes advertised before or after), and the new nodes after them, advertising no routes. It returns false,
   * changing nothing, for any other snapshot; build a new context then.
   *
   * A join burst used to rebuild the context for every round of first maps and every batch, and a tag change
   * rebuilt it once per change: O(tailnet + rules) each, and the rules' source lists (autogroup:member lists
   * every member) rendered and parsed again whole. Extended, the context updates its indexes, recomputes only the
   * alias sets the changes touch (a join grows the sets it falls in; a moved node's old and new memberships name
   * the sets to resolve again; a set nothing touches keeps its identity), compiles again only the grants naming a
   * set that changed, and keeps every merged rule made of the same pieces as before. What a kept rule knows of
   * the nodes (hitsOf, peerSetsOf) turns on addresses and routes alone, which a moved node keeps, so it only
   * catches up over the new nodes. Scopes, the peer index and the node-derived caches are rebuilt lazily, from
   * those rules. The property tests compare the result with a context built from scratch.
   */
  extend(snapshot: Snapshot): boolean {
    const before = this.infos.length;
    if (snapshot.users !== this.tailnet.users || snapshot.nodes.length < before) return false;
    const moved: number[] = [];
    for (let k = 0; k < before; k++) {
      const was = this.infos[k]!.node;
      const now = snapshot.nodes[k]!;
      if (samePlace(was, now)) continue;
      if (!movedInPlace(was, now)) return false;
      moved.push(k);
    }
    const added = snapshot.nodes.slice(before);
    if (added.some((n) => n.availableRoutes.length > 0 || this.byId.has(n.id))) return false;
    if (new Set(added.map((n) => n.id)).size !== added.length) return false;
    let fresh: NodeInfo[];
    try {
      fresh = added.map((n, k) => nodeInfo(n, before + k));
    } catch {
      return false;
    }
    const old = this.tailnet;
    this.tailnet = snapshot;
    if (!fresh.length && !moved.length) return true;
    // The alias sets a moved node leaves or enters: those its old and its new self resolve differently.
    const dirty = new Set<string>();
    if (moved.length) {
      const was = new TailnetContext(this.policy, { users: snapshot.users, nodes: moved.map((k) => old.nodes[k]!) }, this.applyAutoApprovers);
      const now = new TailnetContext(this.policy, { users: snapshot.users, nodes: moved.map((k) => snapshot.nodes[k]!) }, this.applyAutoApprovers);
      for (const [key, alias] of this.resolvedAliases) {
        const a = was.resolve(alias);
        const b = now.resolve(alias);
        if (a && b && !a.equals(b)) dirty.add(key);
      }
    }
    for (const k of moved) {
      const gone = this.infos[k]!;
      const i = nodeInfo(snapshot.nodes[k]!, k);
      this.infos[k] = i;
      this.byId.set(i.node.id, i);
      if (!gone.tagged && gone.node.userId !== undefined) {
        drop(this.nodesByUser, gone.node.userId, gone);
        this.selfPieces.delete(gone.node.userId);
      }
      for (const t of new Set(gone.node.tags)) drop(this.nodesByTag, t, gone);
      if (!i.tagged && i.node.userId !== undefined) {
        insertByIdx(this.nodesByUser, i.node.userId, i);
        this.selfPieces.delete(i.node.userId);
      }
      for (const t of new Set(i.node.tags)) insertByIdx(this.nodesByTag, t, i);
      // No routes advertised, before or after: only admin approvals.
      i.approved = this.effectiveApproved(i);
    }
    // The new nodes alone resolve each alias to what they add to it.
    const alone = fresh.length ? new TailnetContext(this.policy, { users: snapshot.users, nodes: added }, this.applyAutoApprovers) : null;
    for (const [key, set] of this.resolved) {
      if (dirty.has(key) || !alone) continue;
      const more = set && alone.resolve(this.resolvedAliases.get(key)!);
      if (set && more && !more.isEmpty() && !more.subsetOf(set)) this.resolved.set(key, set.union(more));
    }
    for (const i of fresh) {
      this.infos.push(i);
      this.byId.set(i.node.id, i);
      if (!i.tagged && i.node.userId !== undefined) {
        push(this.nodesByUser, i.node.userId, i);
        this.selfPieces.delete(i.node.userId);
      }
      for (const t of new Set(i.node.tags)) push(this.nodesByTag, t, i);
      for (const a of i.addrs) {
        if (a.v6) {
          const at = lowerBound(this.v6Keys, a.n);
          this.v6Keys.splice(at, 0, a.n);
          this.v6Idx.splice(at, 0, i.idx);
        } else {
          const x = Number(a.n), at = lowerBound(this.v4Keys, x);
          this.v4Keys.splice(at, 0, x);
          this.v4Idx.splice(at, 0, i.idx);
        }
      }
      // No routes advertised: only admin approvals, and no router or exit node among the new nodes.
      i.approved = this.effectiveApproved(i);
    }
    // Every index holds the moved and the new nodes now: resolve what the moves touched again, whole.
    for (const key of dirty) this.resolved.set(key, this.resolveUncached(this.resolvedAliases.get(key)!));
    // Merged rules are kept by their pieces; everything else that depends on the nodes is rebuilt on use.
    if (this.compiledGrants) {
      const reusable = new Map<string, PreRule>();
      const keep = (list: PreRule[]) => { for (const p of list) reusable.set(p.sig, p); };
      keep(this.compiledGrants.globalList);
      for (const sc of this.userScopes.values()) if (sc) keep(sc.extras);
      this.reusable = reusable;
      this.compiledGrants = undefined;
      // Only the keys in use stay, and none grown past PLAIN_KEPT_MAX forms.
      const plain = new Map<string, Map<string, FilterRule>>();
      for (const p of reusable.values()) {
        const m = p.key === null ? undefined : this.plainBySource.get(p.key);
        if (m && m.size <= PLAIN_KEPT_MAX) plain.set(p.key!, m);
      }
      this.plainBySource = plain;
    }
    this.userScopes.clear();
    // A node's filter compiled in the generation now ending is the base of its next one; older ones would keep the
    // rule lists (and those rules' node indexes) of generations long gone.
    this.filterMemo = this.filterMemo.map((m) => (m?.generation === this.generation ? m : undefined));
    this.generation++;
    this.nodeScopes = new Array<Scope | null | undefined>(this.infos.length);
    this.resolvedAll = new WeakMap();
    this.resolvedLists = new WeakMap();
    this.addrHits = new WeakMap();
    this.sshPre.clear();
    this.inboundCache.clear();
    this.peerIndex = undefined;
    return true;
  }

  /**
   * grantsCompiled compiles the policy's grants and merges their rules on first use. A context asked only about
   * nodes' routes (approvedRoutesOf) never pays for it.
   */
  private grantsCompiled(): { grants: CompiledGrant[] | null; globalList: PreRule[]; globalByKey: Map<string, PreRule> } {
    if (this.compiledGrants) return this.compiledGrants;
    const grants = this.effective ? this.compileGrants(this.effective) : null;
    const globalByKey = new Map<string, PreRule>();
    let globalList: PreRule[];
    if (grants) {
      const pieces: Piece[] = [];
      grants.forEach((g, gi) => g.rules.forEach((rule, k) => pieces.push({ pos: piecePos(gi, 0, k), rule })));
      globalList = this.mergePieces(pieces);
      for (const p of globalList) if (p.key !== null) globalByKey.set(p.key, p);
    } else {
      globalList = this.mergePieces([{ pos: 0, rule: ALLOW_ALL[0]! }]);
    }
    this.compiledGrants = { grants, globalList, globalByKey };
    return this.compiledGrants;
  }
  private get grants(): CompiledGrant[] | null { return this.grantsCompiled().grants; }
  private get globalList(): PreRule[] { return this.grantsCompiled().globalList; }
  private get globalByKey(): Map<string, PreRule> { return this.grantsCompiled().globalByKey; }

  private userOf(alias: string): PolicyUser | undefined {
    const trimmed = alias.endsWith('@') ? alias.slice(0, -1) : alias;
    const matches = new Set([...(this.usersByEmail.get(trimmed) ?? []), ...(this.usersByName.get(trimmed) ?? [])]);
    return matches.size === 1 ? [...matches][0] : undefined;
  }

  private nodesOfUser(u: PolicyUser | undefined): NodeInfo[] {
    if (!u) return [];
    return this.nodesByUser.get(u.id) ?? [];
  }

  /** resolve turns an alias into addresses; null for autogroup:self (resolved per node). Memoized per alias. */
  resolve(a: Alias): IPSet | null {
    switch (a.kind) {
      case 'wildcard': return TAILNET_WILDCARD;
      case 'host': return this.policy?.hosts[a.name] ?? new IPSet();
      case 'prefix': return a.set;
      default: {
        const key = `${a.kind}\u0000${a.kind === 'userDomain' ? a.domain : a.name}`;
        let v = this.resolved.get(key);
        if (v === undefined) {
          v = this.resolveUncached(a);
          this.resolved.set(key, v);
          this.resolvedAliases.set(key, a);
        }
        return v;
      }
    }
  }

  private resolveUncached(a: Alias): IPSet | null {
    const pol = this.policy;
    const union = (infos: NodeInfo[]) => new IPSet(infos.flatMap((i) => i.ips.ranges));
    switch (a.kind) {
      case 'user': return union(this.nodesOfUser(this.userOf(a.name)));
      case 'userDomain': {
        const suffix = '@' + a.domain.toLowerCase();
        const out: NodeInfo[] = [];
        for (const [uid, nodes] of this.nodesByUser) {
          const u = this.userById.get(uid);
          if (u?.email && u.email.toLowerCase().endsWith(suffix)) out.push(...nodes);
        }
        return union(out);
      }
      case 'group': {
        const bare = a.name.slice('group:'.length);
        const fromProvider = this.snapshot.users.filter((u) => u.groups?.includes(bare));
        return union([...(pol?.groups[a.name] ?? []).map((m) => this.userOf(m)), ...fromProvider].flatMap((u) => this.nodesOfUser(u)));
      }
      case 'tag': return union(this.nodesByTag.get(a.name) ?? []);
      case 'autogroup':
        switch (a.name) {
          case 'autogroup:internet': return INTERNET;
          case 'autogroup:member': return union(this.infos.filter((i) => !i.tagged));
          case 'autogroup:tagged': return union(this.infos.filter((i) => i.tagged));
          case 'autogroup:danger-all': return ALL;
          default: return null;
        }
      default: return this.resolve(a);
    }
  }

  /**
   * resolveList is resolve of every alias of a list, once per list: an acl's grants (one per destination) share its
   * source list, and resolving 2,000 sources again for each of 2,000 destinations took seconds.
   */
  private resolveList(aliases: Alias[]): (IPSet | null)[] {
    let v = this.resolvedLists.get(aliases);
    if (!v) {
      v = aliases.map((a) => this.resolve(a));
      this.resolvedLists.set(aliases, v);
    }
    return v;
  }

  private resolveAll(aliases: Alias[]): IPSet {
    let v = this.resolvedAll.get(aliases);
    if (!v) {
      v = new IPSet(this.resolveList(aliases).flatMap((x) => x?.ranges ?? []));
      this.resolvedAll.set(aliases, v);
    }
    return v;
  }

  /** parse reads one SrcIPs/DstPorts/CapGrant address text (remembered across contexts by parseSetText). */
  private parse(text: string): IPSet {
    return parseSetText(text);
  }

  private parseAll(texts: string[]): IPSet {
    return texts.length === 1 ? this.parse(texts[0]!) : new IPSet(texts.flatMap((t) => this.parse(t).ranges));
  }

  /** nodesWithAddrIn lists (sorted, once per set) the nodes with an address in `set`, by binary search. */
  private nodesWithAddrIn(set: IPSet): Int32Array {
    let v = this.addrHits.get(set);
    if (!v) {
      // A node's bit, once whatever number of its addresses the set holds; read out in index order, no sort. Both
      // the ranges and the keys are in order: each search gallops on from where the one before ended, so a set of
      // thousands of single addresses (autogroup:member) walks the keys about once instead of a binary search from
      // there per range (pushing every hit and sorting them after was most of this, at 10,000 devices 42 s of a join).
      const bits = new Uint32Array((this.infos.length + 31) >>> 5);
      let from4 = 0, from6 = 0;
      const keys4 = this.v4Keys, ids4 = this.v4Idx, keys6 = this.v6Keys, ids6 = this.v6Idx;
      for (const r of set.ranges) {
        if (!r.v6) {
          const end = Number(r.end);
          let k = lowerBound(keys4, Number(r.start), from4);
          for (; k < keys4.length && keys4[k]! <= end; k++) { const x = ids4[k]!; bits[x >>> 5]! |= 1 << (x & 31); }
          from4 = k;
          continue;
        }
        let k = lowerBound(keys6, r.start, from6);
        for (; k < keys6.length && keys6[k]! <= r.end; k++) { const x = ids6[k]!; bits[x >>> 5]! |= 1 << (x & 31); }
        from6 = k;
      }
      v = bitsToList(bits);
      this.addrHits.set(set, v);
    }
    return v;
  }

  /** srcNodes are the nodes the peer rule counts as a source of `srcs`: an address in it, or an approved subnet
   * route overlapping it. */
  private srcNodes(srcs: IPSet): Int32Array {
    const base = this.nodesWithAddrIn(srcs);
    const extra = this.routers.filter((r) => srcs.overlaps(r.subnetSet)).map((r) => r.idx);
    return extra.length ? sortedUnique([...base, ...extra]) : base;
  }

  /** dstNodes are the nodes the peer rule counts as a destination of `dsts`: srcNodes' tests, plus exit nodes
   * when the set covers what an exit route carries (exitCover). */
  private dstNodes(dsts: IPSet): Int32Array {
    const base = this.srcNodes(dsts);
    if (this.exitNodes.length === 0 || !exitCover(dsts)) return base;
    return sortedUnique([...base, ...this.exitNodes.map((e) => e.idx)]);
  }

  /** effectiveApproved is approved ∪ routes the autoApprovers approve for this node. */
  private effectiveApproved(i: NodeInfo): string[] {
    const out = new Set(i.node.approvedRoutes);
    const aa = this.policy?.autoApprovers;
    if (aa && this.applyAutoApprovers) {
      for (const route of i.node.availableRoutes) {
        const r = parsePrefix(route);
        if (!r) continue;
        if (isExitRoute(route)) {
          if (aa.exitNode.some((a) => this.approverIncludes(a, i))) out.add(route);
          continue;
        }
        for (const [key, approvers] of Object.entries(aa.routes)) {
          const k = parsePrefix(key);
          if (!k || k.v6 !== r.v6 || k.start > r.start || k.end < r.end) continue;
          if (approvers.some((a) => this.approverIncludes(a, i))) out.add(route);
        }
      }
    }
    return [...out];
  }

  private approverIncludes(a: Alias, i: NodeInfo): boolean {
    const set = this.resolve(a);
    return !!set && i.addrs.some((x) => set.containsAddr(x));
  }

  private approvedSubnetRouteStrings(): string[] {
    this.subnetRouteStrings ??= [...new Set(this.infos.flatMap((i) => i.subnetRoutes))];
    return this.subnetRouteStrings;
  }

  private srcStrings(srcAliases: Alias[], resolved: IPSet): string[] {
    if (srcAliases.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:danger-all')) return ['*'];
    if (resolved.isEmpty()) return [];
    if (!srcAliases.some((a) => a.kind === 'wildcard')) return srcList(resolved);
    // "*" also covers every approved subnet route, listed route by route.
    const out = resolved.strings();
    const seen = new Set(out);
    const add = (s: string) => { if (!seen.has(s)) { seen.add(s); out.push(s); } };
    for (const r of this.approvedSubnetRouteStrings()) add(r);
    for (const a of srcAliases) {
      if (a.kind === 'wildcard') continue;
      for (const s of (this.resolve(a) ?? new IPSet()).strings()) add(s);
    }
    return out;
  }

  /**
   * compileGrants compiles each grant (acls as grants) in order. A grant compiled before in this context (before an
   * extension) whose aliases resolve to the very same sets is not compiled again: its rules are the same objects,
   * so merging keeps the rules made from them (see mergePieces) and what they know of the nodes.
   */
  private compileGrants(pol: Policy): CompiledGrant[] {
    this.grantSpecs ??= grantsOf(pol);
    return this.grantSpecs.map((g, k) => {
      const src = this.resolveList(g.src), dst = this.resolveList(g.dst);
      const memo = this.grantMemo[k];
      const same = (a: (IPSet | null)[], b: (IPSet | null)[]) => a === b || a.every((d, j) => d === b[j]);
      if (memo && same(memo.src, src) && same(memo.dst, dst)) return memo.out;
      const out = this.compileGrant(g) ?? NO_GRANT;
      this.grantMemo[k] = { src, dst, out };
      return out;
    });
  }

  private compileGrant(g: Grant): CompiledGrant | null {
    if (g.src.length === 0 || g.dst.length === 0) return null;
    // Once per source list: an acl's grants (one per destination) share its list, and a list of 2,000 aliases
    // merged again for each of 2,000 destinations held the server for 30 s.
    const srcSets = this.resolveList(g.src);
    const srcUnion = srcSets.length === 1 ? srcSets[0] ?? new IPSet() : this.resolveAll(g.src);
    const srcIPs = this.srcStrings(g.src, srcUnion);
    if (g.via.length > 0) {
      if (srcUnion.isEmpty()) return null;
      const internet = g.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:internet');
      const dsts = g.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:internet'))
        .map((a) => this.resolve(a)).filter((s): s is IPSet => !!s);
      return { rules: [], self: null, via: { tags: g.via, dsts, internet, ip: g.ip, srcIPs, srcSet: srcUnion } };
    }
    const isSelf = (a: Alias) => a.kind === 'autogroup' && a.name === 'autogroup:self';
    const other = g.dst.filter((a) => !isSelf(a));
    const rules: FilterRule[] = [];
    if (other.length > 0) {
      for (const pp of g.ip) {
        const dstPorts: NetPortRange[] = [];
        // Each entry's set, as piecePorts would parse it from the entry's text.
        const entrySets: IPSet[] = [];
        // The destinations' union is made once, at the end (a union per alias was quadratic in the aliases).
        const dstSets: IPSet[] = [];
        for (const d of other) {
          if (d.kind === 'wildcard') {
            const all = parseSetText('*');
            for (const p of pp.ports) { dstPorts.push({ IP: '*', Ports: p }); entrySets.push(all); }
            dstSets.push(all);
            continue;
          }
          const set = this.resolve(d);
          if (!set) continue;
          const sets = set.prefixSets();
          set.prefixes().forEach((pref, k) => { for (const p of pp.ports) { dstPorts.push({ IP: pref, Ports: p }); entrySets.push(sets[k]!); } });
          dstSets.push(set);
        }
        const dsts = dstSets.length === 1 ? dstSets[0]! : new IPSet(dstSets.flatMap((x) => x.ranges));
        if (dstPorts.length > 0 && srcIPs.length > 0) {
          const rule = withProto({ SrcIPs: srcIPs, DstPorts: dstPorts }, pp.protos);
          PIECE_PORTS.set(rule, { entrySets, dsts });
          rules.push(rule);
        }
      }
      if (g.app) {
        const capGrants: CapGrant[] = [];
        const dstIPs: string[] = [];
        for (const d of other) {
          const set = this.resolve(d);
          if (!set) continue;
          capGrants.push({ Dsts: prefixesWithBits(set), CapMap: g.app });
          dstIPs.push(...set.strings());
        }
        if (capGrants.length > 0) {
          rules.push({ SrcIPs: srcIPs, CapGrant: capGrants });
          if (other.some((a) => a.kind === 'wildcard')) dstIPs.push(...this.approvedSubnetRouteStrings());
          rules.push(...companionRules(dstIPs, prefixesWithBits(srcUnion), g.app));
        }
      }
    }
    const self = g.dst.some(isSelf) ? { srcs: srcSets.map((x) => x ?? new IPSet()), ip: g.ip, app: g.app } : null;
    return { rules, self, via: null };
  }

  /**
   * mergePieces is mergeRules over pieces sorted by position: DstPorts of rules with identical sources and
   * protocols joined at the first one's place, CapGrant rules kept apart. Each result is parsed once (PreRule).
   */
  private mergePieces(pieces: Piece[]): PreRule[] {
    const groups: { first: Piece; key: string | null; pieces: Piece[]; dstPorts: NetPortRange[] }[] = [];
    const index = new Map<string, number>();
    for (const p of pieces) {
      if (p.rule.CapGrant) { groups.push({ first: p, key: null, pieces: [p], dstPorts: [] }); continue; }
      const key = ruleKey(p.rule);
      const at = index.get(key);
      if (at !== undefined) {
        groups[at]!.pieces.push(p);
        groups[at]!.dstPorts.push(...(p.rule.DstPorts ?? []));
      } else {
        index.set(key, groups.length);
        groups.push({ first: p, key, pieces: [p], dstPorts: [...(p.rule.DstPorts ?? [])] });
      }
    }
    return groups.map((g) => {
      const sig = g.pieces.map((p) => `${p.pos}:${ruleId(p.rule)}`).join(',');
      // The same pieces merge into the same rule: an extended context keeps it, and what it knows of the nodes.
      const kept = this.reusable?.get(sig);
      if (kept) return kept;
      const rule = g.key === null ? g.first.rule : { ...g.first.rule, DstPorts: g.dstPorts };
      const parsed = g.pieces.map((p) => piecePorts(p.rule));
      const entrySets = parsed.length === 1 ? parsed[0]!.entrySets : parsed.flatMap((x) => x.entrySets);
      const capSets = (rule.CapGrant ?? []).map((c) => c.Dsts.map((d) => this.parse(d)));
      const capUnions = capSets.map((sets) => new IPSet(sets.flatMap((s) => s.ranges)));
      // Two pieces' unions are merged in one pass; more are sorted together (runs in order sort in O(n log runs)).
      const entryUnion = parsed.length <= 2 ? parsed.slice(1).reduce((acc, x) => acc.union(x.dsts), parsed[0]!.dsts)
        : new IPSet(parsed.flatMap((x) => x.dsts.ranges));
      return {
        rule, key: g.key, firstPos: g.first.pos, pieces: g.pieces, sig,
        srcs: SRC_SETS.get(rule.SrcIPs) ?? this.parseAll(rule.SrcIPs),
        dsts: capUnions.length ? new IPSet([...entryUnion.ranges, ...capUnions.flatMap((s) => s.ranges)]) : entryUnion,
        entrySets, capSets, capUnions, hitsSeen: 0, peerSetsSeen: 0,
        plain: g.key === null ? undefined : this.plainFor(g.key),
      };
    });
  }

  private plainFor(key: string): Map<string, FilterRule> {
    let m = this.plainBySource.get(key);
    if (!m) this.plainBySource.set(key, m = new Map());
    return m;
  }

  /**
   * scopeOf is the node's own part of the rules: its user's autogroup:self rules (untagged nodes) or its via
   * rules (tagged routers); null when the node has only the global rules.
   */
  private scopeOf(i: NodeInfo): Scope | null {
    let s = this.nodeScopes[i.idx];
    if (s !== undefined) return s;
    s = null;
    if (this.grants) {
      if (!i.tagged && i.node.userId) {
        const uid = i.node.userId;
        s = this.userScopes.get(uid);
        if (s === undefined) {
          // A user's autogroup:self rules read only the user's own nodes (and whether each is in the grant's
          // source sets), so an extension keeps them for users that gained or lost no node: the sets change only
          // by the new and the moved nodes' memberships.
          let pieces = this.selfPieces.get(uid);
          if (!pieces) {
            const own: Piece[] = [];
            this.grants.forEach((g, gi) => {
              if (g.self) this.selfRules(g.self, i).forEach((rule, k) => own.push({ pos: piecePos(gi, 1, k), rule }));
            });
            this.selfPieces.set(uid, pieces = own);
          }
          s = pieces.length ? this.makeScope(pieces, (this.nodesByUser.get(uid) ?? []).map((n) => n.idx)) : null;
          this.userScopes.set(uid, s);
        }
      } else if (i.tagged) {
        const pieces: Piece[] = [];
        this.grants.forEach((g, gi) => {
          if (g.via) this.viaRules(g.via, i).forEach((rule, k) => pieces.push({ pos: piecePos(gi, 2, k), rule }));
        });
        if (pieces.length) s = this.makeScope(pieces, [i.idx]);
      }
    }
    this.nodeScopes[i.idx] = s;
    return s;
  }

  private makeScope(pieces: Piece[], owners: number[]): Scope {
    const collided = new Set<string>();
    for (const p of pieces) {
      if (p.rule.CapGrant) continue;
      const k = ruleKey(p.rule);
      if (this.globalByKey.has(k)) collided.add(k);
    }
    const kept: PreRule[] = [];
    const toMerge = [...pieces];
    for (const g of this.globalList) {
      if (g.key !== null && collided.has(g.key)) toMerge.push(...g.pieces);
      else kept.push(g);
    }
    toMerge.sort((a, b) => a.pos - b.pos);
    const extras = this.mergePieces(toMerge);
    const list = [...kept, ...extras].sort((a, b) => a.firstPos - b.firstPos);
    return { owners, list, extras };
  }

  private listOf(i: NodeInfo): PreRule[] {
    return this.scopeOf(i)?.list ?? this.globalList;
  }

  /** unreducedRules is every rule relevant to compiling this node's filter, before
   * dropping destinations the node does not serve. */
  unreducedRules(i: NodeInfo): FilterRule[] {
    if (!this.grants) return ALLOW_ALL;
    return this.listOf(i).map((p) => p.rule);
  }

  private selfRules(s: NonNullable<CompiledGrant['self']>, i: NodeInfo): FilterRule[] {
    if (i.tagged || !i.node.userId) return [];
    const same = this.nodesByUser.get(i.node.userId) ?? [];
    const srcNodes = same.filter((n) => s.srcs.some((set) => n.addrs.some((a) => set.containsAddr(a))));
    const src = new IPSet(srcNodes.flatMap((n) => n.ips.ranges));
    if (src.isEmpty()) return [];
    const rules: FilterRule[] = [];
    for (const pp of s.ip) {
      const dstPorts: NetPortRange[] = [];
      for (const n of same) for (const p of pp.ports) for (const ip of n.ips.strings()) dstPorts.push({ IP: ip, Ports: p });
      if (dstPorts.length > 0) rules.push(withProto({ SrcIPs: srcList(src), DstPorts: dstPorts }, pp.protos));
    }
    if (s.app) {
      const caps = same.map((n) => ({ Dsts: prefixesWithBits(n.ips), CapMap: s.app! }));
      rules.push({ SrcIPs: srcList(src), CapGrant: caps });
      rules.push(...companionRules(same.flatMap((n) => n.ips.strings()), prefixesWithBits(src), s.app));
    }
    return rules;
  }

  private viaRules(v: NonNullable<CompiledGrant['via']>, i: NodeInfo): FilterRule[] {
    if (!v.tags.some((t) => i.node.tags.includes(t))) return [];
    const prefixes: string[] = [];
    for (const d of v.dsts) if (i.subnetSet.overlaps(d)) prefixes.push(...prefixesWithBits(d));
    if (v.internet && i.exitRoutes.length > 0) prefixes.push(...prefixesWithBits(INTERNET));
    if (prefixes.length === 0) return [];
    return v.ip.map((pp) => withProto({
      SrcIPs: v.srcIPs,
      DstPorts: prefixes.flatMap((p) => pp.ports.map((port) => ({ IP: p, Ports: port }))),
    }, pp.protos));
  }

  /**
   * hitsOf indexes, once per PreRule, which DstPorts entries hold an address of each node. Equal entry lists are
   * one array (see plainRule), so nodes served by the same entries share one filter rule object.
   */
  private hitsOf(p: PreRule): Map<number, Hit> {
    // Asked for every rule of every node compiled: answer at once when nothing joined since.
    if (p.hits && p.hitsSeen === this.infos.length) return p.hits;
    if (!p.hits) {
      const byNode = new Map<number, number[]>();
      p.entrySets.forEach((set, e) => {
        for (const x of this.nodesWithAddrIn(set)) {
          const l = byNode.get(x);
          if (l) l.push(e); else byNode.set(x, [e]);
        }
      });
      const hits = new Map<number, Hit>();
      for (const [x, es] of byNode) hits.set(x, internHit(p, es));
      p.hits = hits;
    } else {
      // A rule kept by extend: index the nodes that joined since (each new node's entries, in order).
      for (let x = p.hitsSeen; x < this.infos.length; x++) {
        const hit = hitIn(p, this.infos[x]!);
        if (hit) p.hits.set(x, hit);
      }
    }
    p.hitsSeen = this.infos.length;
    return p.hits;
  }

  /**
   * hitOf is the node's entries of p (hitsOf), read straight from the entries while few nodes have asked: a rule
   * that replaced another in a tag change is asked by the retagged node alone (the others keep what its twin
   * gave them, see packetFilter), and indexing every node of its thousands of entries for that one was a fifth
   * of such a change's compile at 10,000 devices. The HITS_INDEX_AFTER-th node to ask builds the index.
   */
  private hitOf(p: PreRule, i: NodeInfo): Hit | undefined {
    if (p.hits || (p.hitAsks = (p.hitAsks ?? 0) + 1) > HITS_INDEX_AFTER) return this.hitsOf(p).get(i.idx);
    return hitIn(p, i);
  }

  /**
   * packetFilter is the node's filter: only destinations the node itself serves. Each rule of the node's list gives
   * it at most one rule (ruleFor), which depends on that merged rule and on the node alone: an extension keeps the
   * merged rules made of the same pieces, and a node kept in place keeps its addresses and routes. So a node compiled
   * in the generation before (filterMemo) keeps what its kept rules gave it and is compiled against the rules its
   * new list adds (listMove), in list order, instead of against all of them: a join batch or a tag change replaces
   * a few of ~80 rules, and every session's filter is compiled again in the flush that follows (a lookup per rule
   * per session was the largest part of a join burst's compile at 10,000 devices). The property tests compare
   * the result with a context built from scratch.
   */
  packetFilter(i: NodeInfo): FilterRule[] {
    if (!this.grants) return ALLOW_ALL;
    const list = this.listOf(i);
    const memo = this.filterMemo[i.idx];
    const m = memo?.info === i ? memo : undefined;
    if (m?.list === list) return [...m.out];
    const plain = i.subnetSet.isEmpty() && i.exitRoutes.length === 0;
    const from: PreRule[] = [];
    const out: FilterRule[] = [];
    const take = (p: PreRule): void => {
      const r = this.ruleFor(p, i, plain);
      if (r) { from.push(p); out.push(r); }
    };
    if (m?.generation === this.generation - 1) {
      const move = this.listMove(m.list, list);
      // A rule replaced by its twin, with none of this node's addresses in the entries they differ in, gives a node
      // that routes nothing what the rule before gave it: the same rule (equal sources, protocols and entries of
      // its own) or nothing. A tag change replaces a fifth of the rules so, and every node but the retagged one
      // took each of them (a lookup per rule per node, most finding nothing) to learn what it already had.
      const unmoved = (t: Twin | undefined): boolean => {
        if (t === undefined || !plain || this.movedBy(t).has(i.idx)) return false;
        this.twinsKept++;
        return true;
      };
      const added = move.twinned.size ? move.added.filter((q) => !unmoved(move.twinned.get(q))) : move.added;
      let a = 0;
      m.from.forEach((p, k) => {
        let kept = p;
        if (move.dropped.has(p)) {
          const t = move.twins.get(p);
          if (!unmoved(t)) return;
          kept = t!.next;
        }
        while (a < added.length && added[a]!.firstPos < kept.firstPos) take(added[a++]!);
        from.push(kept);
        out.push(m.out[k]!);
      });
      while (a < added.length) take(added[a++]!);
    } else {
      for (const p of list) take(p);
    }
    this.filterMemo[i.idx] = { info: i, list, generation: this.generation, from, out };
    return [...out];
  }

  /** listMove is what `next` adds to `prev` (in list order) and drops from it, once per pair of lists. */
  private listMove(prev: PreRule[], next: PreRule[]): ListMove {
    let row = this.listMoves.get(prev);
    if (!row) this.listMoves.set(prev, row = new Map());
    let move = row.get(next);
    if (!move) {
      const was = new Set(prev), now = new Set(next);
      const added = next.filter((p) => !was.has(p)), dropped = new Set(prev.filter((p) => !now.has(p)));
      const twins = new Map<PreRule, Twin>(), twinned = new Map<PreRule, Twin>();
      if (added.length && dropped.size) {
        // Pair by key: one dropped and one added rule of each key at most (a list holds a key once).
        const byKey = new Map<string, PreRule | null>();
        for (const p of dropped) if (p.key !== null) byKey.set(p.key, byKey.has(p.key) ? null : p);
        const addedKeys = new Map<string, number>();
        for (const q of added) if (q.key !== null) addedKeys.set(q.key, (addedKeys.get(q.key) ?? 0) + 1);
        for (const q of added) {
          const p = q.key === null || addedKeys.get(q.key) !== 1 ? undefined : byKey.get(q.key);
          const t = p ? this.twinOf(p, q) : null;
          if (t) { twins.set(t.old, t); twinned.set(q, t); }
        }
      }
      move = { added, dropped, twins, twinned };
      row.set(next, move);
    }
    return move;
  }

  /** movedBy is the nodes with an address in the entries the twins differ in (usually the one retagged node). */
  private movedBy(t: Twin): Set<number> {
    if (!t.moved || t.movedSeen !== this.infos.length) {
      t.moved = new Set(this.nodesWithAddrIn(t.changed));
      t.movedSeen = this.infos.length;
    }
    return t.moved;
  }

  /**
   * twinOf is `next` as old's twin, or null: the same key and first place, and DstPorts that an in-order walk of
   * both lists aligns entry for entry but for at most TWIN_MAX_CHANGED entries; `changed` holds those entries'
   * addresses. A node with no address among them holds the same entries, in the same order, in both rules (every
   * entry holding one of its addresses is aligned with an equal one). Once per pair of rules.
   */
  private twinOf(old: PreRule, next: PreRule): Twin | null {
    const known = this.twinOfRule.get(old);
    if (known?.next === next) return known.twin;
    let twin: Twin | null = null;
    if (old.firstPos === next.firstPos && !old.rule.CapGrant && !next.rule.CapGrant) {
      const a = old.rule.DstPorts ?? [], b = next.rule.DstPorts ?? [];
      const changed: IPSet[] = [];
      let i = 0, j = 0;
      while ((i < a.length || j < b.length) && changed.length <= TWIN_MAX_CHANGED) {
        if (i < a.length && j < b.length && sameEntry(a[i]!, b[j]!)) { i++; j++; continue; }
        // Where do they agree again: d entries dropped from old, or d entries inserted in next.
        let d = 1;
        for (; d <= TWIN_LOOKAHEAD; d++) {
          if (j < b.length && i + d < a.length && sameEntry(a[i + d]!, b[j]!)) { while (d--) changed.push(old.entrySets[i++]!); break; }
          if (i < a.length && j + d < b.length && sameEntry(a[i]!, b[j + d]!)) { while (d--) changed.push(next.entrySets[j++]!); break; }
        }
        if (d > TWIN_LOOKAHEAD) {
          if (i < a.length) changed.push(old.entrySets[i++]!);
          if (j < b.length) changed.push(next.entrySets[j++]!);
        }
      }
      if (changed.length <= TWIN_MAX_CHANGED) twin = { old, next, changed: new IPSet(changed.flatMap((x) => x.ranges)) };
    }
    this.twinOfRule.set(old, { next, twin });
    return twin;
  }

  /** ruleFor is what merged rule p gives node i's filter (undefined: nothing); plain: i routes nothing. */
  private ruleFor(p: PreRule, i: NodeInfo, plain: boolean): FilterRule | undefined {
    const r = p.rule;
    if (r.CapGrant) {
      const caps: CapGrant[] = [];
      r.CapGrant.forEach((cg, c) => {
        const dsts = new Set<string>();
        if (plain) {
          i.addrs.forEach((a, k) => { if (p.capUnions[c]!.containsAddr(a)) dsts.add(addressPrefixes(i)[k]!); });
        } else {
          cg.Dsts.forEach((d, k) => {
            const set = p.capSets[c]![k]!;
            i.addrs.forEach((a, ak) => { if (set.containsAddr(a)) dsts.add(addressPrefixes(i)[ak]!); });
            if (set.overlaps(i.subnetSet)) dsts.add(d);
          });
        }
        if (dsts.size > 0) caps.push({ Dsts: [...dsts].sort(), CapMap: cg.CapMap });
      });
      return caps.length > 0 ? { SrcIPs: r.SrcIPs, CapGrant: caps } : undefined;
    }
    // A node that routes nothing serves exactly the entries holding its own addresses: read them from the index.
    const own = this.hitOf(p, i);
    if (plain) return own && plainRule(p, own);
    // A router or exit node: the entries holding its own addresses (the index), those overlapping its routes and,
    // for an exit node, those within the internet. A rule reaching none of that is skipped whole: testing every
    // entry of every rule (autogroup:member lists hundreds) was most of a flush's compile for the few routers.
    const routed = !i.subnetSet.isEmpty() && p.dsts.overlaps(i.subnetSet);
    const exits = i.exitRoutes.length > 0 && p.dsts.overlaps(INTERNET);
    if (!routed && !exits) return own && plainRule(p, own);
    const dsts: NetPortRange[] = [];
    let k = 0;
    (r.DstPorts ?? []).forEach((d, e) => {
      if (own && own.es[k] === e) { k++; dsts.push(d); return; }
      const set = p.entrySets[e]!;
      if ((routed && set.overlaps(i.subnetSet)) || (exits && set.subsetOf(INTERNET))) dsts.push(d);
    });
    return dsts.length > 0 ? { ...r, DstPorts: dsts } : undefined;
  }

  /** matchersOf are the parsed rules weighed for `n`'s routes: the global ones and its scope's own. */
  private matchersOf(n: NodeInfo): PreRule[] {
    const s = this.scopeOf(n);
    return s ? [...this.globalList, ...s.extras] : this.globalList;
  }

  /** viaServes reports whether a via grant lets `user` reach something through `router`. */
  viaServes(user: NodeInfo, router: NodeInfo, prefix?: string): boolean {
    for (const g of this.grants ?? []) {
      const v = g.via;
      if (!v || !v.tags.some((t) => router.node.tags.includes(t))) continue;
      if (!user.addrs.some((a) => v.srcSet.containsAddr(a))) continue;
      const routes = prefix ? this.parse(prefix) : router.subnetSet;
      if (prefix && isExitRoute(prefix)) { if (v.internet) return true; continue; }
      if (v.dsts.some((d) => d.overlaps(routes))) return true;
      if (!prefix && v.internet && router.exitRoutes.length > 0) return true;
    }
    return false;
  }

  private peerSetsOf(p: PreRule): { S: NodeList; D: NodeList } {
    const n = this.infos.length;
    if (!p.peerSets) p.peerSets = { S: new NodeList(this.srcNodes(p.srcs)), D: new NodeList(this.dstNodes(p.dsts)) };
    else if (p.peerSetsSeen < n) {
      // A rule kept by extend: the nodes that joined since come after every node it holds (and route nothing).
      const more = (set: IPSet, list: NodeList): NodeList => {
        const extra: number[] = [];
        for (let x = p.peerSetsSeen; x < n; x++) if (this.infos[x]!.addrs.some((a) => set.containsAddr(a))) extra.push(x);
        if (!extra.length) return list;
        const idx = new Int32Array(list.size + extra.length);
        idx.set(list.idx);
        idx.set(extra, list.size);
        return new NodeList(idx);
      };
      p.peerSets = { S: more(p.srcs, p.peerSets.S), D: more(p.dsts, p.peerSets.D) };
    }
    p.peerSetsSeen = n;
    return p.peerSets;
  }

  /**
   * buildPeerIndex turns the peer relation into unions of precomputed node sets, once per context. Node j is a
   * peer of node i when a matcher (parsed merged rule) of i's or of j's rules has one of them among its sources
   * and the other among its destinations, either way round (srcNodes and dstNodes say what "among" means), or
   * when a via grant serves one through the other. A global matcher is in every node's rules: with S and D its
   * source and destination node sets, a node in S gains D and a node in D gains S; via grants give such pairs
   * too (their sources, the routers serving them). A scope's own matcher is only in its owners' rules: an owner
   * gains the whole other side, any other node only the owners on the other side. A node's "class" is the list
   * of contributions it gains; the nodes of one class (typically one user's devices, or one tag set) share a
   * single computed peer list, so each node costs O(rules touching it + its output).
   */
  private buildPeerIndex(): NonNullable<TailnetContext['peerIndex']> {
    const n = this.infos.length;
    const parts: string[][] = Array.from({ length: n }, () => []);
    const contrib = new Map<string, NodeList>();
    const add = (nodes: Int32Array, key: string, gains: NodeList) => {
      if (gains.size === 0) return;
      contrib.set(key, gains);
      for (const x of nodes) parts[x]!.push(key);
    };
    const pairs: { S: NodeList; D: NodeList }[] = this.globalList.map((p) => this.peerSetsOf(p));
    for (const g of this.grants ?? []) {
      const v = g.via;
      if (!v) continue;
      const candidates = sortedUnique(v.tags.flatMap((t) => (this.nodesByTag.get(t) ?? []).map((x) => x.idx)));
      const routers = candidates.filter((x) => {
        const r = this.infos[x]!;
        return v.dsts.some((d) => d.overlaps(r.subnetSet)) || (v.internet && r.exitRoutes.length > 0);
      });
      pairs.push({ S: new NodeList(this.nodesWithAddrIn(v.srcSet)), D: new NodeList(routers) });
    }
    pairs.forEach(({ S, D }, k) => {
      add(S.idx, `g${k}s`, D);
      add(D.idx, `g${k}d`, S);
    });
    const scopes = new Set<Scope>();
    for (const i of this.infos) {
      const s = this.scopeOf(i);
      if (s && s.extras.length) scopes.add(s);
    }
    const scopeIdx = new Int32Array(n).fill(-1);
    let si = 0;
    for (const s of scopes) {
      for (const o of s.owners) scopeIdx[o] = si;
      s.extras.forEach((m, mi) => {
        const { S, D } = this.peerSetsOf(m);
        const SO = new NodeList(S.idx.filter((x) => scopeIdx[x] === si));
        const DO = new NodeList(D.idx.filter((x) => scopeIdx[x] === si));
        const own = (nodes: Int32Array, yes: boolean) => nodes.filter((x) => (scopeIdx[x] === si) === yes);
        add(own(S.idx, true), `s${si}.${mi}so`, D);
        add(own(S.idx, false), `s${si}.${mi}s`, DO);
        add(own(D.idx, true), `s${si}.${mi}do`, S);
        add(own(D.idx, false), `s${si}.${mi}d`, SO);
      });
      si++;
    }
    // Every scope is built by now: the rules kept over from before an extension are no longer needed.
    this.reusable = undefined;
    return { classOf: parts.map((p) => p.join(' ')), contrib, classes: new Map() };
  }

  /** peers are the nodes `i` can reach or be reached by, judged by either side's rules, in tailnet order.
   * The cache argument is no longer used (the context indexes everything itself); kept for callers. */
  peers(i: NodeInfo, _cache?: Map<string, { srcs: IPSet; dsts: IPSet }[]>): NodeInfo[] {
    const peers: NodeInfo[] = [];
    for (const x of this.peerClass(i).members) if (x !== i.idx) peers.push(this.infos[x]!);
    return peers;
  }

  /** peerCount is peers(i).length without building the list (policyWarnings asks it of every node). */
  peerCount(i: NodeInfo): number {
    const { members } = this.peerClass(i);
    return members.length - (indexIn(members, i.idx) >= 0 ? 1 : 0);
  }

  /** somePeer is peers(i).some(test) without building the list. */
  somePeer(i: NodeInfo, test: (peer: NodeInfo) => boolean): boolean {
    for (const x of this.peerClass(i).members) if (x !== i.idx && test(this.infos[x]!)) return true;
    return false;
  }

  /** peerIds is peers() as node ids, read from the class's shared id list (O(output), no NodeInfo detour). */
  peerIds(i: NodeInfo): string[] {
    const { members, ids } = this.peerClass(i);
    const at = indexIn(members, i.idx);
    // Not a member of its own class: the class's list itself, shared (callers never modify a peer list), so
    // consumers can key per-list work on it (PeerSet.ofList parses each shared list once).
    if (at < 0) return ids;
    return [...ids.slice(0, at), ...ids.slice(at + 1)];
  }

  /** peerClassIds is the shared id list of the node's peer class: its peers, plus the node itself when it is a
   * member (see peerListOf). Callers never modify it. */
  peerClassIds(i: NodeInfo): readonly string[] {
    return this.peerClass(i).ids;
  }

  /** peerClass is the peer list shared by every node gaining the same contributions (see buildPeerIndex). */
  private peerClass(i: NodeInfo): { members: Int32Array; ids: string[] } {
    this.peerIndex ??= this.buildPeerIndex();
    const idx = this.peerIndex;
    const key = idx.classOf[i.idx]!;
    let cls = idx.classes.get(key);
    if (!cls) {
      const bits = new Uint32Array((this.infos.length + 31) >>> 5);
      if (key) for (const part of key.split(' ')) idx.contrib.get(part)!.orInto(bits);
      const members = bitsToList(bits);
      cls = { members, ids: Array.from(members, (x) => this.infos[x]!.node.id) };
      idx.classes.set(key, cls);
    }
    return cls;
  }

  /** routeVisible reports whether `viewer` gets route `prefix` of `router` in AllowedIPs:
   * either some rule lets the viewer send into the route, or the viewer's own filter
   * accepts packets from the route (so replies and inbound traffic must be routed). */
  routeVisible(viewer: NodeInfo, router: NodeInfo, prefix: string, _cache?: Map<string, { srcs: IPSet; dsts: IPSet }[]>, includeVia = true): boolean {
    const route = this.parse(prefix);
    const exit = isExitRoute(prefix);
    const reaches = (dsts: IPSet) => (exit ? dsts.overlaps(INTERNET) : dsts.overlaps(route));
    // A standby router for the same prefix always knows the primary's route.
    if (viewer.subnetRoutes.includes(prefix)) return true;
    if (includeVia && this.viaServes(viewer, router, prefix)) return true;
    const sees = (x: PreRule) => (viewer.addrs.some((a) => x.srcs.containsAddr(a)) || x.srcs.overlaps(viewer.subnetSet)) && reaches(x.dsts);
    if (this.matchersOf(viewer).some(sees) || (includeVia && this.matchersOf(router).some(sees))) return true;
    if (exit) return false;
    let inbound = this.inboundCache.get(viewer.node.id);
    if (!inbound) {
      inbound = new IPSet(this.packetFilter(viewer).flatMap((r) => r.SrcIPs.flatMap((x) => this.parse(x).ranges)));
      this.inboundCache.set(viewer.node.id, inbound);
    }
    return inbound.overlaps(route);
  }

  private readonly inboundCache = new Map<string, IPSet>();

  /**
   * matcherCache is kept for callers that still pass it to peers() and routeVisible(); the context now keeps
   * every rule's parsed matchers itself (once per context, shared by all nodes), so it stays empty.
   */
  readonly matcherCache = new Map<string, { srcs: IPSet; dsts: IPSet }[]>();

  info(id: string): NodeInfo {
    const i = this.byId.get(id);
    if (!i) throw new Error(`unknown node ${JSON.stringify(id)}`);
    return i;
  }

  /** sshPreOf resolves ssh rule `k` once per context: sources, principals by owning user, users, destinations. */
  private sshPreOf(k: number, rule: SshRuleSpec): SshPre {
    let p = this.sshPre.get(k);
    if (p) return p;
    const src = this.resolveAll(rule.src);
    const users = dict<string>();
    if (rule.users.includes('autogroup:nonroot')) users['*'] = '=';
    users['root'] = rule.users.includes('root') ? 'root' : '';
    // Only `localpart:*@domain` is a localpart pattern; other spellings are plain user names.
    const isLocalpart = (u: string) => u.startsWith('localpart:*@') && u.length > 12;
    for (const u of rule.users) {
      if (u !== 'root' && u !== 'autogroup:nonroot' && !isLocalpart(u)) users[u] = u;
    }
    const localpartDomains = rule.users.filter(isLocalpart).map((u) => u.slice(12).toLowerCase());
    const localpartOf = new Map<string, string>();
    if (localpartDomains.length) {
      for (const u of this.snapshot.users) {
        const at = u.email?.lastIndexOf('@') ?? -1;
        if (!u.email || at < 0) continue;
        if (localpartDomains.includes(u.email.slice(at + 1).toLowerCase())) localpartOf.set(u.id, u.email.slice(0, at));
      }
    }
    // Principals are grouped by owning user (sorted ids), tagged sources last.
    const byUserAddrs = new Map<string, Addr[]>();
    const tagged: string[] = [];
    for (const x of this.nodesWithAddrIn(src)) {
      const n = this.infos[x]!;
      if (n.tagged) { tagged.push(...principalAddrs(n.addrs)); continue; }
      if (!n.node.userId) continue;
      const l = byUserAddrs.get(n.node.userId);
      if (l) l.push(...n.addrs); else byUserAddrs.set(n.node.userId, [...n.addrs]);
    }
    const byUser = new Map([...byUserAddrs].map(([uid, as]) => [uid, principalAddrs(as)]));
    const otherDst = rule.dst.filter((a) => !(a.kind === 'autogroup' && a.name === 'autogroup:self'));
    p = {
      src, users, localpartOf, hasLocalpart: localpartDomains.length > 0, byUser, userIds: [...byUser.keys()].sort(compareIds), tagged,
      selfDst: rule.dst.some((a) => a.kind === 'autogroup' && a.name === 'autogroup:self'),
      dst: otherDst.length > 0 ? new IPSet(otherDst.flatMap((a) => (this.resolve(a) ?? new IPSet()).ranges)) : null,
    };
    this.sshPre.set(k, p);
    return p;
  }

  /** sshRules compiles the node's SSH policy; null when the policy has no ssh section. */
  sshRules(i: NodeInfo): SSHRule[] | null {
    const pol = this.policy;
    if (!pol || pol.ssh.length === 0) return null;
    const rules: SSHRule[] = [];
    pol.ssh.forEach((rule, k) => {
      const pre = this.sshPreOf(k, rule);
      if (pre.src.isEmpty()) return;
      const action: SSHAction = rule.action === 'accept'
        ? { accept: true, allowAgentForwarding: true, allowLocalPortForwarding: true, allowRemotePortForwarding: true }
        : { holdAndDelegate: 'https://unused' + CHECK_HOLD_URL };
      const users = { ...pre.users };
      const principalsOf = (uid: string) => (pre.byUser.get(uid) ?? []).map((ip) => ({ nodeIP: ip }));
      const add = (principals: SSHPrincipal[], uid: string | null) => {
        const r: SSHRule = { principals, sshUsers: users, action };
        if (rule.acceptEnv.length > 0) r.acceptEnv = rule.acceptEnv;
        rules.push(r);
        const lp = uid === null ? undefined : pre.localpartOf.get(uid);
        if (lp !== undefined) {
          const r2: SSHRule = { principals, sshUsers: { [lp]: lp }, action };
          if (rule.acceptEnv.length > 0) r2.acceptEnv = rule.acceptEnv;
          rules.push(r2);
        }
      };
      if (pre.selfDst && !i.tagged && i.node.userId) {
        const p = principalsOf(i.node.userId);
        if (p.length > 0) add(p, i.node.userId);
      }
      if (pre.dst) {
        const dst = pre.dst;
        if (i.addrs.some((a) => dst.containsAddr(a))) {
          if (pre.hasLocalpart) {
            for (const uid of pre.userIds) add(principalsOf(uid), uid);
            if (pre.tagged.length > 0) add(pre.tagged.map((ip) => ({ nodeIP: ip })), null);
          } else {
            const all = [...pre.userIds.flatMap(principalsOf), ...pre.tagged.map((ip) => ({ nodeIP: ip }))];
            if (all.length > 0) add(all, null);
          }
        } else if (pre.hasLocalpart && i.addrs.some((a) => pre.src.containsAddr(a))) {
          // With localpart users, a source device also gets the rule for its own login.
          if (i.tagged) add(principalAddrs(i.addrs).map((ip) => ({ nodeIP: ip })), null);
          else if (i.node.userId && pre.byUser.has(i.node.userId)) add(principalsOf(i.node.userId), i.node.userId);
        }
      }
    });
    const isCheck = (r: SSHRule) => !!r.action.holdAndDelegate;
    return [...rules.filter(isCheck), ...rules.filter((r) => !isCheck(r))];
  }

  /** capMap is what nodeAttrs (and randomizeClientPort) add to the node's own CapMap. */
  capMap(i: NodeInfo): Record<string, unknown[] | null> {
    const out = dict<unknown[] | null>();
    const pol = this.policy;
    if (!pol) return out;
    if (pol.randomizeClientPort) out['randomize-client-port'] = null;
    for (const na of pol.nodeAttrs) {
      const target = this.resolveAll(na.target);
      if (!i.addrs.some((a) => target.containsAddr(a))) continue;
      for (const a of na.attr) {
        if (!(a in out)) out[a] = null;
        // Funnel comes with the ports clients may expose and a reminder to enable HTTPS.
        if (a === 'funnel') for (const extra of FUNNEL_COMPANIONS) if (!(extra in out)) out[extra] = null;
      }
      if (na.app) for (const [k, v] of Object.entries(na.app)) out[k] = [...((out[k] as unknown[] | null) ?? []), ...v];
    }
    return out;
  }
}

/** nodeInfo is a snapshot node with its addresses parsed; routes are filled in by the context. */
function nodeInfo(n: PolicyNode, idx: number): NodeInfo {
  const texts = [n.ipv4, n.ipv6].filter((x): x is string => !!x);
  const addrs = texts.map((s) => {
    const a = parseAddr(s);
    if (!a) throw new Error(`node ${n.name}: invalid address ${JSON.stringify(s)}`);
    return a;
  });
  // The same set IPSet.of(...texts) gives, without parsing the addresses a second time.
  const ips = new IPSet(addrs.map((a) => ({ v6: a.v6, start: a.n, end: a.n })));
  return {
    idx, node: n, addrs, addrPrefixes: [], ips, tagged: n.tags.length > 0,
    approved: [], subnetRoutes: [], subnetSet: new IPSet(), exitRoutes: [],
  };
}

/** samePlace: the node is the same, unchanged in everything the policy reads of it (see extend). */
function samePlace(a: PolicyNode, b: PolicyNode): boolean {
  return a.id === b.id && a.userId === b.userId && a.ipv4 === b.ipv4 && a.ipv6 === b.ipv6
    && sameList(a.tags, b.tags) && sameList(a.availableRoutes, b.availableRoutes) && sameList(a.approvedRoutes, b.approvedRoutes);
}

/**
 * movedInPlace: the same node at the same addresses with another owner or other tags, advertising no routes before
 * or after (routes decide who routes what, which extend does not follow). See extend.
 */
function movedInPlace(a: PolicyNode, b: PolicyNode): boolean {
  return a.id === b.id && a.ipv4 === b.ipv4 && a.ipv6 === b.ipv6 && a.availableRoutes.length === 0 && b.availableRoutes.length === 0;
}

function addressPrefixes(i: NodeInfo): string[] {
  if (i.addrPrefixes.length !== i.addrs.length) i.addrPrefixes = i.addrs.map((a) => addrText(a) + (a.v6 ? '/128' : '/32'));
  return i.addrPrefixes;
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const l = m.get(k);
  if (l) l.push(v); else m.set(k, [v]);
}

/** drop takes `v` out of its list under `k` (and the key with an emptied list, as a fresh context never has one). */
function drop<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const l = m.get(k)?.filter((x) => x !== v);
  if (l?.length) m.set(k, l); else m.delete(k);
}

/** insertByIdx puts a node into its list under `k` in tailnet order, where a fresh context would have it. */
function insertByIdx<K>(m: Map<K, NodeInfo[]>, k: K, i: NodeInfo): void {
  const l = m.get(k);
  if (!l) { m.set(k, [i]); return; }
  let at = l.length;
  while (at > 0 && l[at - 1]!.idx > i.idx) at--;
  l.splice(at, 0, i);
}

const FUNNEL_COMPANIONS = [
  'https://tailscale.com/cap/funnel-ports?ports=443,8443,10000',
  'https://tailscale.com/cap/warn-funnel-no-https',
];

function compareIds(a: string, b: string): number {
  const na = Number(a);
  const nb = Number(b);
  if (Number.isFinite(na) && Number.isFinite(nb)) return na - nb;
  return a < b ? -1 : a > b ? 1 : 0;
}

function addrText(a: Addr): string {
  return new IPSet([{ v6: a.v6, start: a.n, end: a.n }]).strings()[0]!;
}

/**
 * principalAddrs lists addresses for SSH principals: each address on its own, sorted (IPv4 first), without
 * repeats. A client reads a principal's nodeIP as one address, so a range or prefix (what IPSet.strings() makes of
 * adjacent devices) matched no connection and denied SSH to a user with two devices at neighbouring addresses.
 */
function principalAddrs(addrs: Addr[]): string[] {
  const sorted = [...addrs].sort((a, b) => (a.v6 !== b.v6 ? (a.v6 ? 1 : -1) : a.n < b.n ? -1 : a.n > b.n ? 1 : 0));
  return sorted.filter((a, k) => k === 0 || a.v6 !== sorted[k - 1]!.v6 || a.n !== sorted[k - 1]!.n).map(formatAddr);
}

function withProto(r: FilterRule, protos: number[] | null): FilterRule {
  return protos ? { ...r, IPProto: protos } : r;
}

/** prefixesWithBits lists a set as CIDRs, always with an explicit /bits (CapGrant form). */
function prefixesWithBits(set: IPSet): string[] {
  return set.prefixes().map((p) => (p.includes('/') ? p : p.includes(':') ? `${p}/128` : `${p}/32`));
}

function companionRules(dstIPs: string[], srcPrefixes: string[], app: Record<string, unknown[]>): FilterRule[] {
  return COMPANIONS.filter(([orig]) => orig in app).map(([, companion]) => ({
    SrcIPs: dstIPs,
    CapGrant: [{ Dsts: srcPrefixes, CapMap: { [companion]: null } }],
  }));
}

/** primaryRoutes picks, for every approved subnet route, the node that serves it: the
 * first node (in snapshot order, which callers keep in registration order) that advertises
 * and has it approved, preferring online nodes. Exit routes have no primary. */
export function primaryRoutes(ctx: TailnetContext): Map<string, string> {
  const out = new Map<string, string>();
  for (const prefer of [true, false]) {
    for (const i of ctx.infos) {
      if (prefer && i.node.online === false) continue;
      for (const r of i.subnetRoutes) if (!out.has(r)) out.set(r, i.node.id);
    }
  }
  return out;
}

/**
 * approvedRoutesOf is what compilePolicy gives as `node`'s approvedRoutes (its admin approvals plus what the
 * policy's autoApprovers approve), from the node and the users alone. Whether an approver includes the node (a
 * user, group, tag, autogroup, host or prefix) turns on the node's owner, tags and addresses, never on the rest
 * of the tailnet; and the grants, compiled lazily, are not compiled at all. Cost O(users + autoApprovers).
 */
export function approvedRoutesOf(policy: Policy | null, users: PolicyUser[], node: PolicyNode): string[] {
  return new TailnetContext(policy, { users, nodes: [node] }).info(node.id).approved;
}

/** compilePolicy compiles everything one node receives from the policy. */
export function compilePolicy(policy: Policy | null, snapshot: Snapshot, nodeId: string, ctx = new TailnetContext(policy, snapshot)): CompiledNode {
  const i = ctx.info(nodeId);
  const ssh = ctx.sshRules(i);
  const out: CompiledNode = {
    packetFilter: ctx.packetFilter(i),
    sshPolicy: ssh === null ? null : { rules: ssh },
    capMap: ctx.capMap(i),
    // Read from the context on each access, not kept: a node's list is its class's shared list less itself, a
    // copy of ~400 ids at 1,000 devices, and a server keeps every node's result (NetworkView) while the tailnet
    // stands still: 3.9 of its 36 KiB per idle session. Readers take it once per use (a map, a flush).
    get peers() { return ctx.peerIds(i); },
    approvedRoutes: i.approved,
    randomizeClientPort: policy?.randomizeClientPort ?? false,
  };
  // Not enumerable: a copy ({...c}, mergeCompiled) has its own peers and no class list.
  Object.defineProperty(out, PEER_LIST, { value: () => ({ ids: ctx.peerClassIds(i), self: nodeId }) });
  return out;
}

const PEER_LIST = Symbol('peerList');

/**
 * peerListOf is a compiled node's peers as its class's shared list and the node's own id, which the list holds
 * when the node is a member of its class: a reader that parses lists can parse each shared list once (per class,
 * not per node) and drop the node itself from its own copy. Undefined for results not made by compilePolicy
 * (or copied): read `peers` then.
 */
export function peerListOf(c: CompiledNode): { ids: readonly string[]; self: string } | undefined {
  const f = (c as unknown as Record<symbol, (() => { ids: readonly string[]; self: string }) | undefined>)[PEER_LIST];
  return f?.();
}
