/**
 * bench-headscale-server is Headway's server child of `npm run bench:headscale` (bench-headscale.ts): the real
 * server over a fresh SQLite database in a temp dir, with the policy file the driver wrote in force. It makes an
 * API key and reports it with its URL; the driver does everything else through the REST API, as it does with
 * headscale's. Started without --expose-gc: nothing forces a collection, as nothing does in a deployed server.
 * It ends when the driver disconnects.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startBenchServer } from './bench-core.js';
import { BENCH_DNS } from './bench-headscale-parts.js';

/** HeadwayChildMessage is what this process sends: ready with its URL and an API key, or why it could not start. */
export type HeadwayChildMessage = { type: 'ready'; url: string; apiKey: string } | { type: 'fatal'; error: string };

/** send sends msg, then runs `then` once it is written (exiting before would lose it). */
const send = (msg: HeadwayChildMessage, then?: () => void): void => { process.send?.(msg, undefined, undefined, () => then?.()); };

try {
  if (!process.send) throw new Error('bench-headscale-server must be started with child_process.fork');
  const policyPath = process.env.BENCH_POLICY_FILE;
  if (!policyPath) throw new Error('BENCH_POLICY_FILE is not set');
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-bench-hs-'));
  const server = await startBenchServer(dataDir, { policy: { mode: 'file', path: policyPath }, dns: BENCH_DNS });
  process.once('disconnect', () => {
    server.close().finally(() => {
      rmSync(dataDir, { recursive: true, force: true });
      process.exit(0);
    });
  });
  send({ type: 'ready', url: server.urls.http, apiKey: (await server.state.keys.createApiKey(null)).secret });
} catch (err) {
  const error = (err as Error).stack ?? String(err);
  process.stderr.write(`${error}\n`);
  if (process.send) send({ type: 'fatal', error }, () => process.exit(1));
  else process.exit(1);
}
