/**
 * bench-headscale-server is Headway's server child of `npm run bench:headscale` (bench-headscale.ts): the real
 * server over a fresh SQLite database in a temp dir, the policy file the driver wrote in force, and one reusable
 * pre-auth key per group tag, made through its own key API. It answers the driver over IPC (node ids, renames) and
 * is started without --expose-gc: nothing forces a collection, as nothing does in a deployed server.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startBenchServer } from './bench-core.js';
import { BENCH_DNS, GROUP_TAGS } from './bench-headscale-parts.js';

/** HeadwayChildCommand is what the driver asks of this process. */
export type HeadwayChildCommand =
  | { op: 'nodeIds'; nodeKeys: string[] }
  | { op: 'rename'; nodeId: number; name: string }
  | { op: 'stop' };

/** HeadwayChildReady is sent once the server listens with its policy and keys in place. */
export interface HeadwayChildReady {
  type: 'ready';
  url: string;
  /** keys[g] is a reusable pre-auth key carrying GROUP_TAGS[g]. */
  keys: string[];
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench-headscale-server must be started with child_process.fork');
  const policyPath = process.env.BENCH_POLICY_FILE;
  if (!policyPath) throw new Error('BENCH_POLICY_FILE is not set');
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-bench-hs-'));
  const server = await startBenchServer(dataDir, { policy: { mode: 'file', path: policyPath }, dns: BENCH_DNS });
  const keys: string[] = [];
  for (const tag of GROUP_TAGS) keys.push((await server.state.keys.createPreAuthKey({ userId: null, tags: [tag], reusable: true })).secret);

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  };
  const handle = async (req: HeadwayChildCommand): Promise<unknown> => {
    switch (req.op) {
      case 'nodeIds': return req.nodeKeys.map((k) => server.state.nodes.byNodeKey(k)?.id ?? null);
      case 'rename': await server.state.nodes.rename(req.nodeId, req.name); return null;
      case 'stop': await stop(); return null;
    }
  };
  process.on('message', (raw: unknown) => {
    const req = raw as HeadwayChildCommand & { id: number };
    handle(req).then(
      (result) => process.send?.({ type: 'reply', id: req.id, ok: true, result }, undefined, undefined, () => { if (req.op === 'stop') process.disconnect(); }),
      (err: unknown) => process.send?.({ type: 'reply', id: req.id, ok: false, error: (err as Error).message ?? String(err) }),
    );
  });
  process.on('disconnect', () => { stop().finally(() => process.exit(0)); });
  const ready: HeadwayChildReady = { type: 'ready', url: server.urls.http, keys };
  process.send(ready);
}

main().catch((err: unknown) => {
  const message = (err as Error).stack ?? String(err);
  if (process.send) process.send({ type: 'fatal', error: message });
  else process.stderr.write(message + '\n');
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
});
