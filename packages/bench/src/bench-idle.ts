/**
 * bench-idle measures the resident set of an idle server as an operator runs it: `headway serve` (the CLI, with
 * the V8 options it starts the server under) on a fresh SQLite database with the default configuration but for
 * its ports, read from /proc/<pid>/status at given times after start, with no collection forced. The anonymous
 * part (heap, the C allocator) is the process's own; the file-backed part is mostly the Node binary's code, shared
 * with every Node process on the machine and given back by the kernel under pressure.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { statusBytes } from './bench-stats.js';

/** IdleSample is the server's resident set `atSeconds` after it was started. */
export interface IdleSample { atSeconds: number; rss: number; rssAnon: number; rssFile: number }

/** IDLE_SAMPLE_SECONDS: when the idle server is read (after start-up settles, and once the collector has had time to shrink). */
export const IDLE_SAMPLE_SECONDS = [10, 30];

/** parseStatus reads VmRSS, RssAnon and RssFile (bytes) of a process from /proc/<pid>/status text. */
export function parseStatus(text: string): { rss: number; rssAnon: number; rssFile: number } {
  return { rss: statusBytes(text, 'VmRSS'), rssAnon: statusBytes(text, 'RssAnon'), rssFile: statusBytes(text, 'RssFile') };
}

const CLI = fileURLToPath(new URL('../../../cli/bin/run.js', import.meta.url));

/** measureIdle starts `headway serve` on free loopback ports and samples it at IDLE_SAMPLE_SECONDS. */
export async function measureIdle(seconds: readonly number[] = IDLE_SAMPLE_SECONDS): Promise<IdleSample[]> {
  const dir = mkdtempSync(join(tmpdir(), 'headway-idle-'));
  const config = join(dir, 'config.yaml');
  // Port 0 everywhere: server_url's port is not checked against a live listener at start.
  writeFileSync(config, [
    'server_url: http://127.0.0.1:8080',
    'listen_addr: 127.0.0.1:0',
    'metrics_listen_addr: 127.0.0.1:0',
    'grpc_listen_addr: 127.0.0.1:0',
    'derp:',
    '  server:',
    '    stun_listen_addr: 127.0.0.1:0',
    `data_dir: ${join(dir, 'data')}`,
    'log:',
    '  level: warn',
    '',
  ].join('\n'));
  const child = spawn(process.execPath, [CLI, 'serve', '-c', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const samples: IdleSample[] = [];
  try {
    const t0 = performance.now();
    for (const at of seconds) {
      const wait = at * 1000 - (performance.now() - t0);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (child.exitCode !== null) throw new Error(`headway serve exited (${child.exitCode}): ${stderr.trim()}`);
      samples.push({ atSeconds: at, ...parseStatus(readFileSync(`/proc/${child.pid}/status`, 'utf8')) });
    }
  } finally {
    child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
  return samples;
}
