/**
 * bench-policy-server is the server child of the realistic benchmark (bench-realistic.ts): the real Headway server
 * (SQLite in the driver's data directory BENCH_DATA_DIR, policy.mode database, log level warn) with the seeded plan's
 * users, its policy in force and one reusable pre-auth key per user and per tag set the plan uses. It answers the
 * driver over IPC, including the changes the driver times (rename, tag change, policy change). Forked with --expose-gc
 * and the V8 options `headway serve` runs under. With BENCH_RESTART=1 it is the same server started again on a
 * database that already holds the tailnet (BENCH_PORT, the port the devices know): nothing is created.
 */
import { ChangeProfiler } from './bench-profile.js';
import { writeHeapSnapshot } from 'node:v8';
import { ResidentPeak, sampleMemory, startBenchServer } from './bench-core.js';
import { planKey, planPolicy, planTailnet } from '@headway/testkit';

/** PolicyServerCommand is what the driver asks of this process. */
export type PolicyServerCommand =
  | { op: 'memory' }
  | { op: 'rss' }
  | { op: 'cpu' }
  | { op: 'nodeId'; nodeKey: string }
  | { op: 'rename'; nodeId: number; name: string }
  | { op: 'setTags'; nodeId: number; tags: string[] }
  | { op: 'setPolicy'; variant: 0 | 1 }
  | { op: 'stats' }
  | { op: 'profileStart'; intervalUs: number }
  | { op: 'profileStop'; file: string }
  | { op: 'heapSnapshot'; file: string }
  | { op: 'stop' };

/** PolicyServerReady is sent once the server listens with users, policy and keys in place. */
export interface PolicyServerReady {
  type: 'ready';
  url: string;
  baseDomain: string;
  /** keys maps planKey(device) to a reusable pre-auth key secret (none when started again). */
  keys: Record<string, string>;
  /** startupMs: from this process's start to ready (Node, modules, opening the database, loading the tailnet, listening). */
  startupMs: number;
  /** startServerMs: the part of startupMs in startServer (storage opened and loaded, policy compiled, listeners). */
  startServerMs: number;
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench-policy-server must be started with child_process.fork');
  const size = Number(process.env.BENCH_PLAN_SIZE);
  const seed = Number(process.env.BENCH_PLAN_SEED ?? 1);
  const withPolicy = process.env.BENCH_PLAN_POLICY !== 'none';
  const dataDir = process.env.BENCH_DATA_DIR;
  if (!dataDir) throw new Error('BENCH_DATA_DIR is not set');
  const restart = process.env.BENCH_RESTART === '1';
  const rss = new ResidentPeak();
  const t0 = performance.now();
  const server = await startBenchServer(dataDir, { policy: { mode: 'database' } }, process.env.BENCH_PORT ? Number(process.env.BENCH_PORT) : undefined);
  const startServerMs = performance.now() - t0;
  const plan = planTailnet(size, seed);
  const users = new Map<string, number>();
  if (!restart) for (const u of plan.users) users.set(u.name, (await server.state.users.create({ name: u.name, email: u.email })).id);
  if (withPolicy && !restart) await server.policy.set(plan.policy);
  const keys: Record<string, string> = {};
  for (const d of restart ? [] : plan.devices) {
    const k = planKey(d);
    if (keys[k]) continue;
    const input = d.tags.length ? { userId: null, tags: d.tags, reusable: true } : { userId: users.get(d.user!)!, reusable: true };
    keys[k] = (await server.state.keys.createPreAuthKey(input)).secret;
  }

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    rss.stop();
    await server.close();
  };
  // BENCH_CHANGE_PROF: one CPU profile per measured change, from just before it is applied until every affected
  // device has it (the whole run's --cpu-prof mixes a 150 ms change into a minute of joins).
  const profiler = new ChangeProfiler();
  const timed = async (work: () => Promise<unknown>): Promise<number> => {
    const t0 = performance.now();
    await work();
    return performance.now() - t0;
  };
  const handle = async (req: PolicyServerCommand): Promise<unknown> => {
    switch (req.op) {
      case 'memory': return sampleMemory(server);
      case 'rss': return rss.take();
      case 'cpu': { const c = process.cpuUsage(); return (c.user + c.system) / 1000; }
      case 'nodeId': {
        const node = server.state.nodes.byNodeKey(req.nodeKey);
        if (!node) throw new Error(`no node with node key ${req.nodeKey}`);
        return node.id;
      }
      case 'rename': return timed(() => server.state.nodes.rename(req.nodeId, req.name));
      case 'setTags': return timed(() => server.state.nodes.setTags(req.nodeId, req.tags));
      case 'setPolicy': return timed(() => server.policy.set(planPolicy(seed, req.variant).text));
      case 'stats': {
        const nodes = server.state.nodes.list();
        // How the server batched the changes so far: batches sent and their total time, contexts built.
        const read = async (name: string) => (await server.metrics.registry.getSingleMetric(name)?.get())?.values ?? [];
        const histogram = async (name: string) => {
          // A histogram's values are its buckets, _sum and _count, told apart by metricName.
          const values = (await read(name)) as Array<{ metricName?: string; value: number }>;
          const of = (suffix: string) => values.find((v) => v.metricName === `${name}_${suffix}`)?.value ?? 0;
          return { count: of('count'), sum: of('sum') };
        };
        const { count, sum } = await histogram('headway_map_batch_seconds');
        const contexts = (await read('headway_policy_contexts_built'))[0]?.value ?? 0;
        const extended = (await read('headway_policy_contexts_extended'))[0]?.value ?? 0;
        const adopted = (await read('headway_policy_contexts_adopted'))[0]?.value ?? 0;
        const { count: trimCount, sum: trimSum } = await histogram('headway_memory_trim_seconds');
        const blocksReused = (await read('headway_full_map_peer_blocks_reused'))[0]?.value ?? 0;
        const blocksCompressed = (await read('headway_full_map_peer_blocks_compressed'))[0]?.value ?? 0;
        // Batches sent before their window ended: a change after a lull, or a lull with no change (the burst's end).
        const early = await read('headway_map_batches_early_total');
        const earlyOf = (reason: string) => (early as Array<{ value: number; labels?: Record<string, string | number> }>).find((v) => v.labels?.reason === reason)?.value ?? 0;
        return {
          nodes: nodes.length, withApprovedRoutes: nodes.filter((n) => n.approvedRoutes.length > 0).length, tagged: nodes.filter((n) => n.tags.length > 0).length,
          batches: count, batchSeconds: Math.round(sum * 100) / 100, contextsBuilt: contexts, contextsExtended: extended, contextsAdopted: adopted,
          memoryTrims: trimCount, memoryTrimMs: Math.round(trimSum * 1e4) / 10, peerBlocksReused: blocksReused, peerBlocksCompressed: blocksCompressed,
          batchesHurried: earlyOf('change'), batchesLulled: earlyOf('lull'),
        };
      }
      case 'profileStart': return profiler.start(req.intervalUs);
      case 'profileStop': return profiler.stop(req.file);
      case 'heapSnapshot': return writeHeapSnapshot(req.file);
      case 'stop': await stop(); return null;
    }
  };
  process.on('message', (raw: unknown) => {
    const req = raw as PolicyServerCommand & { id: number };
    handle(req).then(
      (result) => process.send?.({ type: 'reply', id: req.id, ok: true, result }, undefined, undefined, () => { if (req.op === 'stop') process.disconnect(); }),
      (err: unknown) => process.send?.({ type: 'reply', id: req.id, ok: false, error: (err as Error).message ?? String(err) }),
    );
  });
  process.on('disconnect', () => { stop().finally(() => process.exit(0)); });
  // SIGTERM closes the server as `headway serve` does on it (sessions ended, state flushed), then exits.
  process.once('SIGTERM', () => { stop().finally(() => process.exit(0)); });
  const ready: PolicyServerReady = {
    type: 'ready', url: server.urls.http, baseDomain: server.config.dns.base_domain, keys,
    startupMs: Math.round(performance.now()), startServerMs: Math.round(startServerMs),
  };
  process.send(ready);
}

main().catch((err: unknown) => {
  const message = (err as Error).stack ?? String(err);
  if (process.send) process.send({ type: 'fatal', error: message });
  else process.stderr.write(message + '\n');
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
});
