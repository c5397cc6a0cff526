import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * ChildInstance is a Headway server in a child process (the cluster tests kill one
 * with SIGKILL, which an in-process server cannot simulate).
 */
export interface ChildInstance {
  url: string;
  pid: number;
  process: ChildProcess;
  /** kill sends SIGKILL: no shutdown step runs (no leave, no session records removed). */
  kill(): Promise<void>;
  /** stop asks for a clean shutdown (SIGTERM) and waits for the exit. */
  stop(): Promise<void>;
}

const CHILD = fileURLToPath(new URL('./cluster-child.js', import.meta.url));

/** startChildInstance starts `startTestServer(config)` in a child process and waits for its URL. */
export function startChildInstance(config: Record<string, unknown>): Promise<ChildInstance> {
  const child = spawn(process.execPath, [CHILD], {
    env: { ...process.env, HEADWAY_CHILD_CONFIG: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr: string[] = [];
  child.stderr!.on('data', (b: Buffer) => { stderr.push(b.toString()); if (stderr.length > 50) stderr.shift(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const fail = () => reject(new Error(`cluster child exited before listening: ${stderr.join('').slice(-2000)}`));
    child.once('exit', fail);
    lines.on('line', (line) => {
      let msg: { url?: string };
      try { msg = JSON.parse(line) as { url?: string }; } catch { return; }
      if (!msg.url) return;
      child.off('exit', fail);
      resolve({
        url: msg.url, pid: child.pid!, process: child,
        async kill() { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); await exited; },
        async stop() { if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); await exited; },
      });
    });
  });
}

/**
 * TcpBalancer is a small round-robin TCP load balancer for tests: each new
 * connection goes to the next backend that accepts it, as an L4 balancer with
 * health-by-connect would send a device whose instance died to another one.
 */
export class TcpBalancer {
  private readonly server: net.Server;
  private next = 0;
  private readonly sockets = new Set<net.Socket>();
  /** counts records how many connections each backend was given. */
  readonly counts = new Map<string, number>();

  constructor(public backends: string[]) {
    this.server = net.createServer((client) => this.route(client));
  }

  /** listen binds 127.0.0.1:port (default: a free one) and returns the balancer's URL. */
  async listen(at = 0): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(at, '127.0.0.1', resolve));
    const { port } = this.server.address() as net.AddressInfo;
    return `http://127.0.0.1:${port}`;
  }

  /** refusing: every connection is cut at once (a network partition between a client and the backends). */
  private refusing = false;

  /** cut ends every open connection and refuses new ones until restore. */
  cut(): void {
    this.refusing = true;
    for (const s of this.sockets) s.destroy();
  }

  restore(): void { this.refusing = false; }

  private route(client: net.Socket): void {
    if (this.refusing) { client.destroy(); return; }
    this.sockets.add(client);
    client.on('close', () => this.sockets.delete(client));
    client.on('error', () => client.destroy());
    client.pause();
    this.pick(client, 0);
  }

  /** pick connects the client to the next backend, trying the others when one refuses. */
  private pick(client: net.Socket, tried: number): void {
    if (tried >= this.backends.length || client.destroyed) { client.destroy(); return; }
    const target = new URL(this.backends[this.next++ % this.backends.length]!);
    const upstream = net.connect(Number(target.port), target.hostname);
    let connected = false;
    upstream.once('connect', () => {
      connected = true;
      this.counts.set(target.origin, (this.counts.get(target.origin) ?? 0) + 1);
      this.sockets.add(upstream);
      upstream.on('close', () => { this.sockets.delete(upstream); client.destroy(); });
      client.on('close', () => upstream.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.on('error', () => {
      upstream.destroy();
      if (!connected) this.pick(client, tried + 1);
    });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
