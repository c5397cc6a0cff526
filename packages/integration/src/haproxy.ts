import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';

/** HAProxy is Debian's haproxy running in the foreground as an HTTP reverse proxy in front of one backend. */
export interface HAProxy {
  port: number;
  stop(): Promise<void>;
}

/** haproxyMissing says why HAProxy cannot run here (undefined when it can). */
export function haproxyMissing(): string | undefined {
  const r = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  return r.status === 0 ? undefined : 'haproxy is not installed (apt-get install haproxy)';
}

/**
 * startHAProxy proxies 127.0.0.1:<port> to the backend in HTTP mode, adding X-Forwarded-For (option
 * forwardfor) as a reverse proxy in front of Headway does, upgrades (ts2021, DERP, WebSocket) included.
 */
export async function startHAProxy(backendPort: number): Promise<HAProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'headway-haproxy-'));
  const port = await freePort();
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, [
    'global',
    '  maxconn 256',
    'defaults',
    '  mode http',
    '  timeout connect 5s',
    '  timeout client 30s',
    '  timeout server 30s',
    '  timeout tunnel 1h',
    'frontend public',
    `  bind 127.0.0.1:${port}`,
    '  option forwardfor',
    '  default_backend headway',
    'backend headway',
    `  server headway 127.0.0.1:${backendPort}`,
    '',
  ].join('\n'));
  const child: ChildProcess = spawn('haproxy', ['-db', '-f', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) { await stop(); throw new Error(`haproxy exited: ${stderr.trim()}`); }
    if (await reachable(port)) return { port, stop };
    if (i >= 100) { await stop(); throw new Error(`haproxy did not listen on ${port}: ${stderr.trim()}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function reachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}
