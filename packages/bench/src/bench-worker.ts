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
  applyMapResponse, bitsCount, bitsHas, emptyNetMap, expectedPeers, planKey, planTailnet, setFreezeShared, setSkippedMembers, TestDevice,
  type DevicePlan, type NetMap, type Node, type NodeID, type TailnetPlan,
} from '@headway/testkit';
import { joinDevice, redial, runPool, type JoinPhases } from './bench-join.js';
import { CompactPeers, PeerDirectory } from './bench-compact.js';
import { peersMatch, type Wanted } from './bench-match.js';
import { ChangeProfiler } from './bench-profile.js';

// The tests check that netmap code never edits a shared message (frozen there); here freezing only costs CPU.
setFreezeShared(false);
// The devices never read their packet filter: the decoder leaves it out, unparsed (most of a device's own text).
setSkippedMembers(['PacketFilter', 'PacketFilters']);

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
 * FULL_SAMPLE_EVERY: every this many devices of a worker (its first included) keep whole nodes, as a real client
 * does, next to a compact copy fed the same messages; the rest keep only the compact peer state.
 */
const FULL_SAMPLE_EVERY = 25;

/** directory pairs node ids with plan devices for every device of this worker (see PeerDirectory). */
let directory = new PeerDirectory(0);
/** shadows[k]: the compact peer state of sampled device k, fed every message its whole netmap is (see sampled). */
const shadows = new Map<number, NetMap>();

/** indexOfKey is the plan index of a peer by its node key alone (undefined: not a plan device). */
function indexOfKey(p: Node): number | undefined {
  return keyIndex.get(p.Key ?? '');
}

/**
 * holdsExactly: the netmap holds exactly the expected device indices, checked in full apart from any running count:
 * a compact state bit by bit, a whole one by a scan of every peer's node key.
 */
function holdsExactly(nm: NetMap, want: Wanted): boolean {
  return nm.peers instanceof CompactPeers ? nm.peers.exactly(want) : peersMatch(nm.peers, want, indexOfKey);
}

/** sameIds: two peer maps hold the same node ids under the same node keys. */
function sameIds(a: ReadonlyMap<NodeID, Node>, b: ReadonlyMap<NodeID, Node>): boolean {
  if (a.size !== b.size) return false;
  for (const [id, p] of a) if (b.get(id)?.Key !== p.Key) return false;
  return true;
}

/**
 * checkDevice is the full check of device k: its peers are exactly want and, for a sampled device, its compact
 * copy holds the same peers as its whole netmap. Undefined when it holds, else what is wrong.
 */
function checkDevice(k: number, want: Wanted): string | undefined {
  const d = devices[k]!;
  if (!holdsExactly(d.netmap, want)) return `${d.hostname}: its peers are not exactly the expected ones`;
  const shadow = shadows.get(k);
  if (shadow && !(sameIds(shadow.peers, d.netmap.peers) && holdsExactly(shadow, want))) return `${d.hostname}: its compact peer state differs from its whole netmap`;
  return undefined;
}

/** newDevice makes plan device i, compact or sampled (see FULL_SAMPLE_EVERY). */
function newDevice(k: number, i: number, keys?: Pick<TestDevice, 'machineKey' | 'nodeKey' | 'discoKey'>): TestDevice {
  const base = { serverUrl: url, hostname: plan.devices[i]!.hostname, ...(keys ? { machineKey: keys.machineKey, nodeKey: keys.nodeKey, discoKey: keys.discoKey } : {}) };
  if (k % FULL_SAMPLE_EVERY !== 0) return new TestDevice({ ...base, peers: () => new CompactPeers(directory) });
  return new TestDevice({
    ...base,
    keep: (msg) => { applyMapResponse(shadows.get(k)!, msg); return msg; },
    // Each map session starts both from nothing.
    peers: () => { shadows.set(k, emptyNetMap(new CompactPeers(directory))); return new Map(); },
  });
}

/** watching makes a compact peer map count the wanted peers as it is edited; its predicate is then O(1) per message. */
function watching(d: TestDevice, want: Wanted): (nm: NetMap) => boolean {
  const peers = d.netmap.peers;
  if (!(peers instanceof CompactPeers)) return (nm) => holdsExactly(nm, want);
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
    const joined = await joinDevice(devices[k]!, { authKey: keys[planKey(d0)]!, ...(d0.routes.length ? { routes: d0.routes } : {}) }, (d) => newDevice(k, from + k, d));
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
 * dials were retried and the devices whose dial still failed when the budget ran out (converge leaves them out).
 */
async function reconnect(concurrency: number, budgetMs: number): Promise<{ retries: number; unreached: string[] }> {
  let retries = 0;
  const unreached: string[] = [];
  unreachedDevices.clear();
  const deadline = performance.now() + budgetMs;
  await runPool(devices.length, concurrency, async (k) => {
    try {
      retries += await redial(devices[k]!, deadline);
    } catch (err) {
      unreachedDevices.add(k);
      unreached.push((err as Error).message);
    }
  });
  return { retries, unreached };
}

/** unreachedDevices: this worker's devices the last reconnect could not bring back (converge does not wait for them). */
const unreachedDevices = new Set<number>();

/** converge waits until every device of this worker (but those a reconnect left unreached) holds exactly its expected peers; returns when the last did and how many did. */
async function converge(timeoutMs: number): Promise<{ lastAt: number; wrong: string[]; back: number }> {
  let lastAt = 0;
  const wrong: string[] = [];
  const matched: Array<{ k: number; want: Wanted }> = [];
  await Promise.all(devices.map((d, k) => {
    if (unreachedDevices.has(k)) return undefined;
    const want = expected?.[k] ?? allOthers(k);
    return d.waitFor(watching(d, want), timeoutMs).then(
      () => { lastAt = Math.max(lastAt, epochNow()); matched.push({ k, want }); },
      () => {
        const have = [...d.netmap.peers.values()].map((p) => indexOfKey(p) ?? -1);
        const haveSet = new Set(have);
        const missing: number[] = [];
        for (let i = 0; i < plan.devices.length; i++) if (bitsHas(want.bits, i) && !haveSet.has(i)) missing.push(i);
        const extra = have.filter((i) => i < 0 || !bitsHas(want.bits, i));
        wrong.push(`${d.hostname}: ${have.length} peers, expected ${want.size} (missing ${missing.slice(0, 5).join(',')}${missing.length > 5 ? '…' : ''}; extra ${extra.slice(0, 5).join(',')}${extra.length > 5 ? '…' : ''})`);
      },
    );
  }));
  // Once every device is in, outside the measured convergence: each counted match agrees with the full check.
  for (const { k, want } of matched) {
    const why = checkDevice(k, want);
    if (why) wrong.push(`${why} (its counted match said it held them)`);
  }
  return { lastAt, wrong, back: matched.length };
}

/**
 * arm computes what every device of this worker must see after the change, then watches the affected ones:
 * a rename affects those that see the device; a tag or policy change those whose peer set changes, and for a
 * tag change also those still seeing the device (its Tags change). Each watcher records when it first held.
 */
async function arm(change: Change, timeoutMs: number): Promise<void> {
  let after: Wanted[] | undefined = expected;
  // The checks below read the target's name and tags: from now on every device keeps that peer whole.
  if (change.kind !== 'policy') directory.followed.add(change.nodeId);
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
 * verify counts the devices, affected or not, not holding exactly what the policy lets them see, by the full check
 * of every device (checkDevice). The driver asks once every worker has reported its times, so the scan shares the two cores
 * with no measured change.
 */
function verify(): number {
  let wrong = 0;
  devices.forEach((_, k) => { if (checkDevice(k, expected?.[k] ?? allOthers(k))) wrong++; });
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
      directory = new PeerDirectory(plan.devices.length);
      shadows.clear();
      devices = Array.from({ length: cmd.to - cmd.from }, (_, k) => newDevice(k, cmd.from + k));
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
      directory.reset((key) => keyIndex.get(key));
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
