/**
 * bench-headscale is `npm run bench:headscale`: Headway and headscale v0.29.2 measured side by side by one run.
 * For each size, each server in turn starts over a fresh SQLite database with the same four-group policy
 * (bench-headscale-parts.ts), N virtual devices (@headway/testkit, speaking ts2021 to either server) join with
 * tagged pre-auth keys made through the server's REST API, and the run waits until every device holds
 * exactly the peers the policy gives it. It reports the server's resident memory (10 s after start, the peak
 * sampled from /proc every 0.5 s while devices join and stay connected, and 10 s after the join; nothing forces
 * a collection), the join's wall time and server CPU, a rename reaching every device (--rounds times), and the
 * load generator's own CPU (the devices live in this process) next to the server's. One table per size, then
 * one `BENCH_JSON {...}` line. A server that is slow or never converges is reported, not an error; the exit
 * status is non-zero only when the harness itself failed (a server that would not start, an API call that failed,
 * not one device able to join).
 *
 * Usage: node packages/bench/dist/src/bench-headscale.js [--sizes 0,100,300] [--rounds R] [--join-timeout S]
 *        [--rename-timeout S] [--servers headway,headscale]
 * The headscale binary is ${HEADSCALE_HOME:-~/.cache/headway/headscale}/v0.29.2/headscale, built by
 * .ci/install-headscale.sh when missing.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { TestDevice } from '@headway/testkit';
import { joinDevice } from './bench-join.js';
import {
  benchPolicy, expectedPeerIndexes, groupOf, medianRound, parseHeadscaleBenchOptions, sizeTable,
  type HeadscaleBenchOptions, type RenameRound, type ServerFigures, type ServerName,
} from './bench-headscale-parts.js';
import { ensureHeadscale, makeKeys, nodeIdOf, ProcSampler, rename, startHeadscale, startHeadway, type Target } from './bench-headscale-target.js';

/** SETTLE_MS: idle memory is read this long after the server started, steady memory this long after the join. */
const SETTLE_MS = 10_000;
/** PROGRESS_MS: how often a join in progress is reported. */
const PROGRESS_MS = 20_000;
/** RECONNECT_MS: how long a device whose map stream ended waits before it polls again. */
const RECONNECT_MS = 1_000;
/** JOIN_CONCURRENCY: joins in flight, as `npm run bench` makes them by default. */
const JOIN_CONCURRENCY = 20;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const now = (): number => performance.now();
const loadCpuMs = (): number => { const c = process.cpuUsage(); return (c.user + c.system) / 1000; };
const round1 = (x: number): number => Math.round(x * 10) / 10;

function log(line: string): void {
  process.stdout.write(line + '\n');
}

/** Fleet is the joined devices of one run, with each one's expected peers by node key. */
interface Fleet {
  devices: Array<TestDevice | undefined>;
  expected: Array<Set<string>>;
  /** closing: the run is over; a stream that ends now is not polled again. */
  closing: boolean;
  /** mapEndError: how the first map stream that ended did. */
  mapEndError: string;
}

/** holdsExpected: the device's peers are exactly the expected node keys. */
function holdsExpected(d: TestDevice, expected: Set<string>): boolean {
  const peers = d.netmap.peers;
  if (peers.size !== expected.size) return false;
  for (const p of peers.values()) if (!p.Key || !expected.has(p.Key)) return false;
  return true;
}

/** peerDiff counts the expected peers a device lacks and the peers it holds that it should not. */
function peerDiff(d: TestDevice, expected: Set<string>): { missing: number; extra: number } {
  const held = new Set([...d.netmap.peers.values()].map((p) => p.Key ?? ''));
  return { missing: [...expected].filter((k) => !held.has(k)).length, extra: [...held].filter((k) => !expected.has(k)).length };
}

/**
 * waitAll waits, up to `deadline`, for `holds` on every device, checking after every map message; it returns the
 * time each one first held (undefined: not by the deadline). A map stream that ends is not the end of the wait:
 * the device polls again (keepPolling) and a fresh map may still bring what it waits for.
 */
function waitAll(devices: readonly TestDevice[], holds: (d: TestDevice) => boolean, deadline: number): Promise<Array<number | undefined>> {
  return Promise.all(devices.map((d) => new Promise<number | undefined>((resolve) => {
    if (holds(d)) { resolve(now()); return; }
    const check = (): void => { if (holds(d)) { done(); resolve(now()); } };
    const timer = setTimeout(() => { done(); resolve(undefined); }, Math.max(1, deadline - now()));
    const done = (): void => { clearTimeout(timer); d.off('update', check); d.off('keepalive', check); };
    d.on('update', check);
    d.on('keepalive', check);
  })));
}

/**
 * keepPolling makes a device poll again RECONNECT_MS after its map stream ended (the server closed it, or it
 * failed), as tailscaled restarts its map poll, until `fleet.closing`; each end is counted in the figures.
 */
function keepPolling(d: TestDevice, fleet: Fleet, fig: ServerFigures): void {
  let retrying = false;
  const retry = (): void => {
    if (fleet.closing) return;
    d.connect().then(() => d.startMap({ stream: true })).then(
      () => { retrying = false; },
      () => { setTimeout(retry, RECONNECT_MS); },
    );
  };
  d.on('mapEnd', (err?: Error) => {
    if (fleet.closing || retrying) return;
    fig.mapStreamsEnded++;
    fleet.mapEndError ||= err?.message ?? 'ended by the server';
    retrying = true;
    setTimeout(retry, RECONNECT_MS);
  });
}

/** joinFleet joins n devices (device i in group i % 4) and waits until each holds its expected peers. */
async function joinFleet(target: Target, keys: readonly string[], n: number, opts: HeadscaleBenchOptions, fig: ServerFigures): Promise<Fleet> {
  const first = Array.from({ length: n }, (_, i) => new TestDevice({ serverUrl: target.url, hostname: `bench-${i}` }));
  const nodeKeys = first.map((d) => d.nodeKeyText);
  const expected = first.map((_, i) => new Set(expectedPeerIndexes(i, n).map((j) => nodeKeys[j]!)));
  const devices: Array<TestDevice | undefined> = [];
  const fleet: Fleet = { devices, expected, closing: false, mapEndError: '' };
  const start = now();
  const deadline = start + opts.joinTimeoutSeconds * 1000;
  let next = 0;
  let firstError = '';
  const lane = async (): Promise<void> => {
    while (next < n && now() < deadline) {
      const i = next++;
      try {
        const d = (await joinDevice(first[i]!, { authKey: keys[groupOf(i)]! })).device;
        keepPolling(d, fleet, fig);
        devices[i] = d;
      } catch (err) {
        fig.joinFailures++;
        firstError ||= (err as Error).message;
        await first[i]!.close().catch(() => undefined);
      }
    }
  };
  const holding = (): Array<[TestDevice, Set<string>]> => devices.flatMap((d, i) => (d ? [[d, expected[i]!] as [TestDevice, Set<string>]] : []));
  // Progress every PROGRESS_MS, so a slow join shows how far it got.
  const progress = setInterval(() => {
    const joined = holding();
    log(`  [${target.name} ${n}] after ${((now() - start) / 1000).toFixed(0)} s: ${joined.length} joined, ${joined.filter(([d, e]) => holdsExpected(d, e)).length} hold their expected peers`);
  }, PROGRESS_MS);
  const pool = Promise.all(Array.from({ length: Math.min(JOIN_CONCURRENCY, n) }, lane));
  const poolDone = await Promise.race([pool.then(() => true), sleep(Math.max(1, deadline - now())).then(() => false)]);
  if (firstError) log(`  [${target.name} ${n}] ${fig.joinFailures} devices failed to join, e.g. ${firstError}`);
  // Not one device in: the harness's set-up is wrong (a key the server refuses), not the server slow.
  if (poolDone && fig.joinFailures === n) throw new Error(`no device could join: ${firstError}`);
  const expectedOf = new Map(holding());
  const joined = [...expectedOf.keys()];
  const times = poolDone ? await waitAll(joined, (d) => holdsExpected(d, expectedOf.get(d)!), deadline) : [undefined];
  clearInterval(progress);
  // Only when the join did not converge: a device that held its peers may be polling again by now.
  const off = times.every((x) => x !== undefined) ? [] : joined.filter((d) => !holdsExpected(d, expectedOf.get(d)!)).slice(0, 3)
    .map((d) => { const { missing, extra } = peerDiff(d, expectedOf.get(d)!); return `${d.hostname} lacks ${missing} and holds ${extra} unexpected of ${expectedOf.get(d)!.size}`; });
  if (off.length) log(`  [${target.name} ${n}] not holding their expected peers, e.g. ${off.join('; ')}`);
  if (fig.mapStreamsEnded) log(`  [${target.name} ${n}] ${fig.mapStreamsEnded} map streams ended and were polled again, e.g. ${fleet.mapEndError}`);
  if (poolDone && fig.joinFailures === 0 && times.every((t) => t !== undefined)) {
    fig.joinMs = round1(Math.max(start, ...(times as number[])) - start);
  } else {
    fig.joinTimedOut = fig.joinFailures === 0;
    const held = times.filter((t) => t !== undefined).length;
    log(`  [${target.name} ${n}] ${poolDone ? `${joined.length} joined, ${held} hold their expected peers` : `${next} of ${n} joins started`}: did not converge within ${opts.joinTimeoutSeconds}s`);
  }
  return fleet;
}

/** renameRound renames device 0 and times the new name reaching every device that holds it (itself included). */
async function renameRound(target: Target, fleet: Fleet, nodeId: number, name: string, sampler: ProcSampler, timeoutSeconds: number): Promise<RenameRound> {
  const key0 = fleet.devices[0]!.nodeKeyText;
  const watchers = fleet.devices.flatMap((d, i) => (d && (i === 0 || fleet.expected[i]!.has(key0)) ? [d] : []));
  // What a device holds of device 0: itself for device 0, else its peer.
  const held = (d: TestDevice) => (d === fleet.devices[0] ? d.netmap.self : [...d.netmap.peers.values()].find((p) => p.Key === key0));
  const hasName = (d: TestDevice): boolean => held(d)?.Name?.split('.')[0] === name;
  const cpu0 = sampler.cpuMs(), load0 = loadCpuMs();
  const t0 = now();
  // Armed before the call: a device that has the name before the call returns counts as reached at once.
  const seen = waitAll(watchers, hasName, t0 + timeoutSeconds * 1000);
  await rename(target, nodeId, name);
  const returned = now();
  const times = await seen;
  const reached = times.filter((t) => t !== undefined).length;
  const missed = watchers.filter((_, i) => times[i] === undefined).slice(0, 3).map((d) => {
    const node = held(d);
    return `${d.hostname} holds ${node ? `the name ${node.Name}` : 'no such peer'} after ${d.netmap.messages} map messages`;
  });
  if (missed.length) log(`  [${target.name}] the rename to ${name} did not reach e.g. ${missed.join('; ')}`);
  return {
    callMs: round1(returned - t0),
    reachedMs: reached === watchers.length ? round1(Math.max(0, ...(times as number[]).map((t) => t - returned))) : undefined,
    reached, devices: watchers.length, serverCpuMs: round1(sampler.cpuMs() - cpu0), loadCpuMs: round1(loadCpuMs() - load0),
  };
}

/** measure runs one server at one size and returns its figures. */
async function measure(server: ServerName, n: number, opts: HeadscaleBenchOptions, env: { policyFile: string; headscale?: string }): Promise<ServerFigures> {
  const startedAt = now();
  const target = server === 'headway' ? await startHeadway(env.policyFile) : await startHeadscale(env.headscale!, env.policyFile);
  const sampler = new ProcSampler(target.pid);
  let fleet: Fleet | undefined;
  try {
    const keys = await makeKeys(target);
    await sleep(startedAt + SETTLE_MS - now());
    const fig: ServerFigures = { rssIdle: sampler.rss(), rssPeak: 0, rssSteady: 0, hwm: 0, joinTimedOut: false, joinFailures: 0, mapStreamsEnded: 0, serverCpuJoinMs: 0, loadCpuJoinMs: 0, renames: [] };
    if (n > 0) {
      sampler.resetPeak();
      const cpu0 = sampler.cpuMs(), load0 = loadCpuMs();
      fleet = await joinFleet(target, keys, n, opts, fig);
      fig.serverCpuJoinMs = round1(sampler.cpuMs() - cpu0);
      fig.loadCpuJoinMs = round1(loadCpuMs() - load0);
      log(`  [${target.name} ${n}] join ${fig.joinMs !== undefined ? `converged in ${(fig.joinMs / 1000).toFixed(2)} s` : 'did not converge'}, server CPU ${(fig.serverCpuJoinMs / 1000).toFixed(2)} s, load generator CPU ${(fig.loadCpuJoinMs / 1000).toFixed(2)} s`);
      await sleep(SETTLE_MS);
    }
    fig.rssSteady = sampler.rss();
    const d0 = fleet?.devices[0];
    const nodeId = d0 ? await nodeIdOf(target, d0.nodeKeyText) : undefined;
    if (fleet && nodeId !== undefined) {
      for (let r = 0; r < opts.rounds; r++) {
        const round = await renameRound(target, fleet, nodeId, `renamed-${r}`, sampler, opts.renameTimeoutSeconds);
        fig.renames.push(round);
        log(`  [${target.name} ${n}] rename ${r + 1}: call ${round.callMs} ms, then ` +
          (round.reachedMs !== undefined ? `${round.reachedMs} ms until all ${round.devices} devices had it` : `did not converge within ${opts.renameTimeoutSeconds}s (${round.reached}/${round.devices} devices had it)`) +
          `; server CPU ${round.serverCpuMs} ms, load generator CPU ${round.loadCpuMs} ms`);
      }
      fig.renameMs = medianRound(fig.renames)?.reachedMs;
    }
    sampler.rss();
    fig.rssPeak = sampler.peak;
    fig.hwm = sampler.hwm();
    const logged = target.logSummary();
    if (logged) log(`  [${target.name} ${n}] ${logged}`);
    return fig;
  } finally {
    sampler.stop();
    // Closing the devices ends their streams: that is not the server's doing.
    if (fleet) fleet.closing = true;
    await Promise.all((fleet?.devices ?? []).map((d) => d?.close().catch(() => undefined)));
    await target.stop();
  }
}

/** SizeResult is one size's figures per server, with the load average before and after. */
interface SizeResult {
  devices: number;
  loadavgBefore: number[];
  loadavgAfter: number[];
  servers: Partial<Record<ServerName, ServerFigures>>;
}

const loadText = (l: readonly number[]): string => l.map((x) => x.toFixed(2)).join(' ');

async function main(): Promise<void> {
  const opts = parseHeadscaleBenchOptions(process.argv.slice(2));
  const machine = { nproc: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryMiB: Math.round(totalmem() / 1048576), node: process.version };
  const headscale = opts.servers.includes('headscale') ? ensureHeadscale(log) : undefined;
  const dir = mkdtempSync(join(tmpdir(), 'bench-headscale-'));
  const policyFile = join(dir, 'policy.hujson');
  writeFileSync(policyFile, benchPolicy());
  log(`Headway and headscale side by side — ${machine.nproc} CPU (${machine.cpuModel}), ${machine.memoryMiB} MiB, node ${machine.node}; ` +
    `sizes ${opts.sizes.join(',')}, ${opts.rounds} rename rounds; headscale ${headscale ?? 'not run'}`);
  const results: SizeResult[] = [];
  const failed: Array<{ devices: number; server: ServerName; error: string }> = [];
  try {
    for (const n of opts.sizes) {
      const result: SizeResult = { devices: n, loadavgBefore: loadavg().map((x) => Math.round(x * 100) / 100), loadavgAfter: [], servers: {} };
      log(`\n== N=${n} devices (load average ${loadText(result.loadavgBefore)}) ==`);
      for (const server of opts.servers) {
        try {
          result.servers[server] = await measure(server, n, opts, { policyFile, ...(headscale ? { headscale } : {}) });
        } catch (err) {
          const error = (err as Error).message;
          log(`  [${server} ${n}] FAILED: ${error}`);
          failed.push({ devices: n, server, error });
        }
      }
      result.loadavgAfter = loadavg().map((x) => Math.round(x * 100) / 100);
      results.push(result);
      log('');
      log(sizeTable(n, opts.servers.map((name) => ({ name, figures: result.servers[name] })), opts.renameTimeoutSeconds, opts.joinTimeoutSeconds));
      log(`load average after N=${n}: ${loadText(result.loadavgAfter)}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  log('BENCH_JSON ' + JSON.stringify({ machine, options: opts, headscale, sizes: results, failed }));
  if (failed.length) process.exitCode = 1;
}

main().then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(`bench-headscale: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(2);
  },
);
