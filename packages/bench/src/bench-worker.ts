/**
 * bench-worker is a child process of the realistic benchmark (bench-realistic.ts) holding a slice of the virtual
 * devices, so the load generator spreads over every core instead of being the bottleneck. It rebuilds the seeded
 * plan itself, computes what each of its devices must see with the policy package's own compile (before the
 * change it measures is made), joins its devices, and times when each affected device's netmap shows a change.
 * Times are epoch milliseconds (performance.timeOrigin + now), comparable across processes on one machine.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { writeHeapSnapshot } from 'node:v8';
import {
  bitsCount, bitsHas, expectedPeers, planKey, planTailnet, setFreezeShared, TestDevice,
  type DevicePlan, type FilterRule, type MapResponse, type NetMap, type Node, type TailnetPlan,
} from '@headway/testkit';
import { joinDevice, redial, runPool, type JoinPhases } from './bench-join.js';
import { MatchingPeers, peersMatch, type Wanted } from './bench-match.js';
import { ChangeProfiler } from './bench-profile.js';

// The tests check that netmap code never edits a shared message (frozen there); here freezing only costs CPU.
setFreezeShared(false);

/**
 * slimPeers: of each peer a device keeps what the worker checks (ID, node key, name, tags), one object per distinct
 * such peer shared by every device of the worker. Every message is still decoded and applied whole by the client
 * model; only what it retains is smaller. At 5,000 devices each saw ~2,000 peers: 2,500 devices per worker held five
 * million whole peers (addresses, endpoints, Hostinfo, CapMap), and marking them over and over made the workers'
 * garbage collector use twice the server's CPU on the shared two cores.
 */
const slimPeers = new Map<number, Node[]>();
/** sameTags: both peers have the same tags (or none). */
function sameTags(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (!a?.length || !b?.length) return !a?.length && !b?.length;
  return a.length === b.length && a.every((t, k) => t === b[k]);
}
/**
 * slimPeer finds the slim form among the peer's forms seen so far (a rename or a tag change makes another), by its
 * id, cheaper than a key string made of the four fields for every peer of every first map.
 */
function slimPeer(n: Node): Node {
  let forms = slimPeers.get(n.ID);
  if (!forms) slimPeers.set(n.ID, forms = []);
  for (const s of forms) if (s.Key === n.Key && s.Name === n.Name && sameTags(s.Tags, n.Tags)) return s;
  const s: Node = n.Tags ? { ID: n.ID, Key: n.Key, Name: n.Name, Tags: n.Tags } : { ID: n.ID, Key: n.Key, Name: n.Name };
  forms.push(s);
  return s;
}
/**
 * slimLists: a peer list many devices received as one shared frame is one parsed array (the decoder shares it, see
 * decodeFrame in zstd.ts), slimmed once for all of them.
 */
const slimLists = new WeakMap<readonly Node[], Node[]>();
function slimList(list: readonly Node[]): Node[] {
  let out = slimLists.get(list);
  if (!out) { out = list.map(slimPeer); slimLists.set(list, out); }
  return out;
}
/** NO_RULES stands for a packet filter list the worker does not check (the chunk names are kept). */
const NO_RULES: FilterRule[] = [];
function keepChecked(msg: MapResponse): MapResponse {
  if (!msg.Peers && !msg.PeersChanged && !msg.PacketFilter && !msg.PacketFilters) return msg;
  const out: MapResponse = { ...msg };
  if (msg.Peers) out.Peers = msg.Peers.map(slimPeer);
  if (msg.PeersChanged) out.PeersChanged = slimList(msg.PeersChanged);
  if (msg.PacketFilter) out.PacketFilter = NO_RULES;
  if (msg.PacketFilters) out.PacketFilters = Object.fromEntries(Object.entries(msg.PacketFilters).map(([k, v]) => [k, v && NO_RULES]));
  return out;
}

export type WorkerCommand =
  | { op: 'init'; url: string; seed: number; size: number; from: number; to: number; keys: Record<string, string>; policy: boolean }
  | { op: 'join'; concurrency: number; budgetMs: number }
  | { op: 'reconnect'; concurrency: number; budgetMs: number }
  | { op: 'keys'; nodeKeys: string[] }
  | { op: 'converge'; timeoutMs: number }
  | { op: 'arm'; change: Change; timeoutMs: number }
  | { op: 'collect' }
  | { op: 'verify' }
  | { op: 'stats' }
  | { op: 'heapSnapshot'; file: string }
  | { op: 'profileStart'; intervalUs: number }
  | { op: 'profileStop'; file: string }
  | { op: 'close' };

/** Change is one measured change; the driver applies it on the server between `arm` and `collect`. */
export type Change =
  | { kind: 'rename'; index: number; nodeId: number; name: string }
  | { kind: 'tags'; index: number; nodeId: number; tags: string[] }
  | { kind: 'policy'; variant: 0 | 1 };

export interface WorkerStats { cpuMs: number; rss: number; heapUsed: number; mapBytes: number; devices: number }


let plan: TailnetPlan;
let from = 0;
let devices: TestDevice[] = [];
let keys: Record<string, string> = {};
let url = '';
let withPolicy = true;
/** variant is the policy variant in force (the measured policy changes alternate 1 and 0). */
let variant: 0 | 1 = 0;
/** expected[i - from]: the device indices device i must see; undefined without a policy (everyone). */
let expected: Wanted[] | undefined;

let keyIndex = new Map<string, number>();
const profiler = new ChangeProfiler();
let armed: Promise<{ seen: number[]; timeouts: number; affected: number; bytes: number }> | undefined;

function cpuMs(): number {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000;
}

function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

function stats(): WorkerStats {
  const m = process.memoryUsage();
  return { cpuMs: cpuMs(), rss: m.rss, heapUsed: m.heapUsed, mapBytes: devices.reduce((s, d) => s + d.mapBytes, 0), devices: devices.length };
}

/** expectedSets evaluates the policy (variant) over the plan for this worker's devices (see expectedPeers). */
function expectedSets(variant: 0 | 1): Wanted[] {
  return expectedPeers(plan.devices, plan.seed, variant, from, from + devices.length).map((bits) => ({ bits, size: bitsCount(bits) }));
}

function allOthers(k: number): Wanted {
  const n = plan.devices.length;
  const bits = new Uint32Array((n + 31) >>> 5).fill(0xffffffff);
  for (let i = n; i < bits.length * 32; i++) bits[i >>> 5]! &= ~(1 << (i & 31));
  const i = from + k;
  bits[i >>> 5]! &= ~(1 << (i & 31));
  return { bits, size: n - 1 };
}

function sameWanted(a: Wanted, b: Wanted): boolean {
  if (a.size !== b.size) return false;
  for (let w = 0; w < a.bits.length; w++) if (a.bits[w] !== b.bits[w]) return false;
  return true;
}

/**
 * byNodeId caches, per node id, 1 + the device index its node key names (0: not looked up yet). peersMatch runs
 * after every message of every watched device, over all its peers: a string-keyed lookup per peer would be the
 * largest part of the workers' CPU in a change (a device keeps its node key and id through a run).
 */
let byNodeId = new Int32Array(0);

/** indexOfPeer is the plan index of a peer, by its node id, looked up by key the first time (undefined: not a plan device). */
function indexOfPeer(p: Node): number | undefined {
  if (p.ID >= byNodeId.length) {
    const grown = new Int32Array(Math.max(p.ID + 1, byNodeId.length * 2));
    grown.set(byNodeId);
    byNodeId = grown;
  }
  const cached = byNodeId[p.ID]!;
  if (cached > 0) return cached - 1;
  const i = keyIndex.get(p.Key ?? '');
  if (i !== undefined) byNodeId[p.ID] = i + 1;
  return i;
}

/** holdsExactly: the netmap holds exactly the expected device indices (peers are identified by node key), by a scan
 * of every peer: the independent check once a change or the join is over (see watching for the one per message). */
function holdsExactly(nm: NetMap, want: Wanted): boolean {
  return peersMatch(nm.peers, want, indexOfPeer);
}

/** watching makes the device's peer map count the wanted peers as it is edited; its predicate is then O(1) per message. */
function watching(d: TestDevice, want: Wanted): (nm: NetMap) => boolean {
  const peers = d.netmap.peers;
  if (!(peers instanceof MatchingPeers)) return (nm) => holdsExactly(nm, want);
  peers.watch(want);
  // A new map session has a new peer map: the counting one only judges the session it was watching.
  return (nm) => (nm.peers === peers ? peers.matches() : holdsExactly(nm, want));
}

/** JoinResult is one worker's part of the join; loopDelay is how long its event loop was held up meanwhile (ms). */
export interface JoinResult { latencies: number[]; retries: number; doneAt: number[]; phases: JoinPhases[]; loopDelay: { p99: number; max: number } }

async function join(concurrency: number, budgetMs: number): Promise<JoinResult> {
  const latencies: number[] = [];
  const phases: JoinPhases[] = [];
  // The devices' side of a join's latency: a dial waits for this loop as much as for the server's.
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const doneAt: number[] = [];
  let retries = 0;
  const deadline = performance.now() + budgetMs;
  await runPool(devices.length, concurrency, async (k) => {
    if (performance.now() > deadline) throw new Error(`join budget used up: ${latencies.length}/${devices.length} devices of this worker joined`);
    const t0 = performance.now();
    const d0 = plan.devices[from + k]!;
    const joined = await joinDevice(devices[k]!, { authKey: keys[planKey(d0)]!, ...(d0.routes.length ? { routes: d0.routes } : {}) });
    devices[k] = joined.device;
    retries += joined.retries;
    latencies.push(performance.now() - t0);
    phases.push(joined.phases);
    doneAt.push(epochNow());
  }).finally(() => delay.disable());
  return { latencies, retries, doneAt, phases, loopDelay: { p99: delay.percentile(99) / 1e6, max: delay.max / 1e6 } };
}

/**
 * reconnect dials every device again once the server is back after a restart, as tailscaled does: the same keys,
 * no new login, a new Noise connection and map stream (whose first message is the full map). Returns how many
 * dials were retried.
 */
async function reconnect(concurrency: number, budgetMs: number): Promise<{ retries: number }> {
  let retries = 0;
  const deadline = performance.now() + budgetMs;
  await runPool(devices.length, concurrency, async (k) => {
    retries += await redial(devices[k]!, deadline);
  });
  return { retries };
}

/** converge waits until every device of this worker holds exactly its expected peers; returns when the last did. */
async function converge(timeoutMs: number): Promise<{ lastAt: number; wrong: string[] }> {
  let lastAt = 0;
  const wrong: string[] = [];
  const matched: Array<{ d: TestDevice; want: Wanted }> = [];
  await Promise.all(devices.map((d, k) => {
    const want = expected?.[k] ?? allOthers(k);
    return d.waitFor(watching(d, want), timeoutMs).then(
      () => { lastAt = Math.max(lastAt, epochNow()); matched.push({ d, want }); },
      () => {
        const have = [...d.netmap.peers.values()].map((p) => keyIndex.get(p.Key ?? "") ?? -1);
        const haveSet = new Set(have);
        const missing: number[] = [];
        for (let i = 0; i < plan.devices.length; i++) if (bitsHas(want.bits, i) && !haveSet.has(i)) missing.push(i);
        const extra = have.filter((i) => i < 0 || !bitsHas(want.bits, i));
        wrong.push(`${d.hostname}: ${have.length} peers, expected ${want.size} (missing ${missing.slice(0, 5).join(',')}${missing.length > 5 ? '…' : ''}; extra ${extra.slice(0, 5).join(',')}${extra.length > 5 ? '…' : ''})`);
      },
    );
  }));
  // Once every device is in, outside the measured convergence: each counted match agrees with a scan of the peers.
  for (const { d, want } of matched) {
    if (!holdsExactly(d.netmap, want)) wrong.push(`${d.hostname}: the counted match disagrees with a scan of its peers`);
  }
  return { lastAt, wrong };
}

/**
 * arm computes what every device of this worker must see after the change, then watches the affected ones:
 * a rename affects those that see the device; a tag or policy change those whose peer set changes, and for a
 * tag change also those still seeing the device (its Tags change). Each watcher records when it first held.
 */
async function arm(change: Change, timeoutMs: number): Promise<void> {
  let after: Wanted[] | undefined = expected;
  if (change.kind === 'tags') {
    const d = plan.devices[change.index]!;
    const next: DevicePlan = { ...d, tags: [...change.tags].sort(), user: d.user };
    plan.devices[change.index] = next;
    after = withPolicy ? expectedSets(variant) : undefined;
  } else if (change.kind === 'policy') {
    variant = change.variant;
    after = withPolicy ? expectedSets(variant) : undefined;
  }
  const bytesBefore = devices.reduce((s, d) => s + d.mapBytes, 0);
  const seen: number[] = [];
  let timeouts = 0;
  const watchers: Array<Promise<void>> = [];
  devices.forEach((d, k) => {
    const before = expected?.[k] ?? allOthers(k);
    const want = after?.[k] ?? allOthers(k);
    let predicate: ((nm: NetMap) => boolean) | undefined;
    if (change.kind === 'rename') {
      if (bitsHas(before.bits, change.index)) predicate = (nm) => nm.peers.get(change.nodeId)?.Name?.startsWith(`${change.name}.`) === true;
    } else {
      const changed = !sameWanted(before, want);
      const seesTarget = change.kind === 'tags' && bitsHas(want.bits, change.index);
      if (changed || seesTarget) {
        const tags = change.kind === 'tags' ? JSON.stringify([...change.tags].sort()) : '';
        const held = watching(d, want);
        predicate = (nm) => held(nm) && (!seesTarget || JSON.stringify([...(nm.peers.get(change.nodeId)?.Tags ?? [])].sort()) === tags);
      }
    }
    if (!predicate) return;
    let seenAt = 0;
    const p = predicate;
    watchers.push(d.waitFor((nm) => {
      if (seenAt === 0 && p(nm)) seenAt = epochNow();
      return seenAt > 0;
    }, timeoutMs).then(() => { seen.push(seenAt); }, () => { timeouts++; }));
  });
  expected = after;
  const affected = watchers.length;
  armed = Promise.all(watchers).then(() => ({ seen, timeouts, affected, bytes: devices.reduce((s, d) => s + d.mapBytes, 0) - bytesBefore }));
}

/**
 * verify counts the devices, affected or not, not holding exactly what the policy lets them see, by a scan of every
 * peer of every device. The driver asks once every worker has reported its times, so the scan shares the two cores
 * with no measured change.
 */
function verify(): number {
  let wrong = 0;
  devices.forEach((d, k) => { if (!holdsExactly(d.netmap, expected?.[k] ?? allOthers(k))) wrong++; });
  return wrong;
}

async function handle(cmd: WorkerCommand): Promise<unknown> {
  switch (cmd.op) {
    case 'init': {
      plan = planTailnet(cmd.size, cmd.seed);
      from = cmd.from;
      url = cmd.url;
      keys = cmd.keys;
      withPolicy = cmd.policy;
      devices = plan.devices.slice(cmd.from, cmd.to).map((d) => new TestDevice({ serverUrl: cmd.url, hostname: d.hostname, keep: keepChecked, peers: () => new MatchingPeers(indexOfPeer) }));
      const t0 = cpuMs();
      variant = 0;
      expected = withPolicy ? expectedSets(0) : undefined;
      const sizes = expected?.map((s) => s.size) ?? [];
      return { nodeKeys: devices.map((d) => d.nodeKeyText), compileCpuMs: cpuMs() - t0, peerCounts: sizes };
    }
    case 'join': return join(cmd.concurrency, cmd.budgetMs);
    case 'reconnect': return reconnect(cmd.concurrency, cmd.budgetMs);
    case 'keys':
      keyIndex = new Map(cmd.nodeKeys.map((k, i) => [k, i]));
      byNodeId = new Int32Array(0);
      return null;
    case 'converge': return converge(cmd.timeoutMs);
    case 'arm': await arm(cmd.change, cmd.timeoutMs); return null;
    case 'collect': {
      if (!armed) throw new Error('collect without arm');
      const r = await armed;
      armed = undefined;
      return r;
    }
    case 'verify': return verify();
    case 'stats': return stats();
    case 'heapSnapshot': return writeHeapSnapshot(cmd.file);
    // BENCH_CHANGE_PROF profiles the workers too, from arming a change until every affected device has it.
    case 'profileStart': return profiler.start(cmd.intervalUs);
    case 'profileStop': return profiler.stop(cmd.file);
    case 'close':
      await runPool(devices.length, 200, (k) => devices[k]!.close());
      return stats();
  }
}

process.on('message', (raw: unknown) => {
  const cmd = raw as WorkerCommand & { id: number };
  // The driver may have gone (a failed size stops every worker): a reply to nobody is dropped, not thrown.
  const reply = (msg: object): void => { if (process.connected) process.send?.(msg, undefined, undefined, () => undefined); };
  handle(cmd).then(
    (result) => reply({ id: cmd.id, ok: true, result }),
    (err: unknown) => reply({ id: cmd.id, ok: false, error: (err as Error).message ?? String(err) }),
  );
});
process.on('disconnect', () => {
  void Promise.all(devices.map((d) => d.close().catch(() => undefined))).finally(() => process.exit(0));
});
