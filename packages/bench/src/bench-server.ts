/**
 * bench-server is the child-process entry of `npm run bench`: it runs the real Headway server
 * (SQLite in a temp dir, log level warn, no metrics listener) and answers the driver over IPC.
 * Forked with --expose-gc so memory samples are taken after a full collection.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isServerRequest, type ServerMessage, type ServerRequest } from './bench-ipc.js';
import type { RunningServer } from '@headway/server';
import { sampleMemory, startBenchServer } from './bench-core.js';

function send(msg: ServerMessage, then?: () => void): void {
  process.send?.(msg, undefined, undefined, () => then?.());
}

/** boot starts the server; BENCH_DATABASE (a `database` block) and BENCH_NOISE_KEY make it one instance of a cluster (bench --instances). */
function boot(dataDir: string): Promise<RunningServer> {
  const database = process.env.BENCH_DATABASE ? JSON.parse(process.env.BENCH_DATABASE) as Record<string, unknown> : undefined;
  return startBenchServer(dataDir, database ? { database, cluster: { enabled: true }, noise: { private_key_path: process.env.BENCH_NOISE_KEY } } : {});
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench-server must be started with child_process.fork by bench.js');
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-bench-'));
  const server = await boot(dataDir);
  // In a cluster only the first instance makes the user and key (the driver uses its key for every instance).
  let secret = '';
  if (!process.env.BENCH_DATABASE || process.env.BENCH_BOOTSTRAP) {
    const user = await server.state.users.create({ name: 'bench' });
    secret = (await server.state.keys.createPreAuthKey({ userId: user.id, reusable: true })).secret;
  }

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  };

  const handle = async (req: ServerRequest): Promise<unknown> => {
    switch (req.op) {
      case 'memory': {
        const sample = sampleMemory(server);
        // BENCH_HEAP_SNAPSHOT (a directory): write a heap snapshot at every sample, to see where session memory goes.
        if (process.env.BENCH_HEAP_SNAPSHOT) {
          const { writeHeapSnapshot, getHeapSpaceStatistics } = await import('node:v8');
          const file = writeHeapSnapshot(join(process.env.BENCH_HEAP_SNAPSHOT, `server-${Date.now()}.heapsnapshot`));
          const spaces = getHeapSpaceStatistics().map((sp) => `${sp.space_name} ${(sp.space_size / 1048576).toFixed(1)}/${(sp.space_used_size / 1048576).toFixed(1)} MiB`);
          process.stderr.write(`[server] heap snapshot ${file}; spaces (size/used): ${spaces.join(', ')}\n`);
        }
        return sample;
      }
      case 'nodeId': {
        // A device that joined through another cluster instance is known here once its announcement arrives.
        const until = Date.now() + 10_000;
        while (!server.state.nodes.byNodeKey(req.nodeKey) && process.env.BENCH_DATABASE && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
        const node = server.state.nodes.byNodeKey(req.nodeKey);
        if (!node) throw new Error(`no node with node key ${req.nodeKey}`);
        return node.id;
      }
      case 'rename': {
        const t0 = performance.now();
        await server.state.nodes.rename(req.nodeId, req.name);
        return performance.now() - t0;
      }
      case 'stop':
        await stop();
        return null;
    }
  };

  process.on('message', (raw: unknown) => {
    if (!isServerRequest(raw)) {
      process.stderr.write(`[server] ignoring malformed IPC message: ${JSON.stringify(raw).slice(0, 200)}\n`);
      return;
    }
    handle(raw).then(
      (result) => {
        // Disconnect only once the reply is written, or the driver would never see it.
        send({ type: 'reply', id: raw.id, ok: true, result }, raw.op === 'stop' ? () => process.disconnect() : undefined);
      },
      (err: unknown) => send({ type: 'reply', id: raw.id, ok: false, error: (err as Error).message ?? String(err) }),
    );
  });
  // The driver dying must not leave a server (and its temp dir) behind.
  process.on('disconnect', () => {
    stop().finally(() => process.exit(0));
  });

  send({ type: 'ready', url: server.urls.http, authKey: secret, baseDomain: server.config.dns.base_domain, dataDir });
}

main().catch((err: unknown) => {
  const message = (err as Error).stack ?? String(err);
  if (process.send) send({ type: 'fatal', error: message });
  else process.stderr.write(message + '\n');
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
});
