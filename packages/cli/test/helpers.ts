import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** RUN is bin/run.js, located from dist/test so tests work from any cwd. */
export const RUN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));
export const FIXTURES = fileURLToPath(new URL('../../test/fixtures/', import.meta.url));

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** tempDir makes a scratch directory (used as HOME and cwd so no real config is found). */
export function tempDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'headway-cli-test-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * headway runs the CLI as a child process (asynchronously, so a fake server in this
 * process can answer it) with a clean environment: no HEADWAY_* leaks in from the caller.
 */
export function headway(args: string[], opts: { env?: Record<string, string>; cwd?: string; timeout?: number } = {}): Promise<RunResult> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('HEADWAY_') && !k.startsWith('TAP')) env[k] = v;
  Object.assign(env, opts.env ?? {});
  return new Promise((resolve) => {
    execFile(process.execPath, [RUN, ...args], { env, cwd: opts.cwd, timeout: opts.timeout ?? 20_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('HEADWAY_') && !k.startsWith('TAP')) env[k] = v;
  return Object.assign(env, extra);
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * headwayTty runs the CLI on a pseudo-terminal (util-linux `script`) and types `input`,
 * for the interactive confirmation prompts; stdout holds everything the terminal showed.
 */
export function headwayTty(args: string[], input: string, opts: { env?: Record<string, string>; cwd?: string } = {}): Promise<RunResult> {
  const command = [process.execPath, RUN, ...args].map(shellQuote).join(' ');
  return new Promise((resolve) => {
    const child = execFile('script', ['-qec', command, '/dev/null'], { env: cleanEnv(opts.env), cwd: opts.cwd, timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
    // Type the answer once the prompt had time to appear; a pty echoes it back.
    setTimeout(() => child.stdin?.end(input), 1500);
  });
}

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
  headers: http.IncomingHttpHeaders;
}

export type Answer = { status?: number; body: unknown; contentType?: string };
export type Handler = (req: RecordedRequest) => Answer;

/**
 * FakeApi is a stand-in for the server's REST API on a unix socket: it records every
 * request and answers from a table of `METHOD /path` handlers (404 problem otherwise).
 */
export class FakeApi {
  readonly requests: RecordedRequest[] = [];
  readonly routes = new Map<string, Handler>();
  private server: http.Server | undefined;
  readonly socketPath: string;

  constructor(dir: string) {
    this.socketPath = join(dir, 'headway.sock');
  }

  on(method: string, path: string, handler: Handler | Answer): this {
    this.routes.set(`${method} ${path}`, typeof handler === 'function' ? handler : () => handler);
    return this;
  }

  /** last is the most recent request, for asserting what a command sent. */
  get last(): RecordedRequest {
    const r = this.requests[this.requests.length - 1];
    if (!r) throw new Error('no request was made');
    return r;
  }

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const url = new URL(req.url ?? '/', 'http://unix');
        const text = Buffer.concat(chunks).toString('utf8');
        const recorded: RecordedRequest = {
          method: req.method ?? '',
          path: url.pathname,
          query: Object.fromEntries(url.searchParams),
          body: text ? JSON.parse(text) : undefined,
          headers: req.headers,
        };
        this.requests.push(recorded);
        const handler = this.routes.get(`${recorded.method} ${recorded.path}`);
        const answer: Answer = handler
          ? handler(recorded)
          : { status: 404, contentType: 'application/problem+json', body: { type: 'about:blank', title: 'Not Found', status: 404, detail: `no route ${recorded.method} ${recorded.path}`, code: 'not_found' } };
        res.writeHead(answer.status ?? 200, { 'content-type': answer.contentType ?? 'application/json' });
        res.end(JSON.stringify(answer.body));
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(this.socketPath, resolve));
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** problem builds an RFC 7807 answer as the server sends for failures. */
export function problem(status: number, detail: string, code = 'bad_request'): Answer {
  return { status, contentType: 'application/problem+json', body: { type: 'about:blank', title: 'Error', status, detail, code } };
}

export const ALICE = { id: '1', name: 'alice', displayName: 'Alice A', email: 'alice@example.com', createdAt: '2026-01-02T03:04:05Z' };

export const NODE = {
  id: '7',
  machineKey: 'mkey:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef',
  nodeKey: 'nodekey:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210',
  discoKey: 'discokey:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff',
  ipAddresses: ['100.64.0.7', 'fd7a:115c:a1e0::7'],
  name: 'laptop',
  givenName: 'laptop-1',
  user: ALICE,
  lastSeen: '2026-03-01T10:00:00Z',
  expiry: '2099-01-01T00:00:00Z',
  createdAt: '2026-02-01T00:00:00Z',
  registerMethod: 'REGISTER_METHOD_AUTH_KEY',
  tags: ['tag:web'],
  online: true,
  approvedRoutes: ['10.0.0.0/24'],
  availableRoutes: ['10.0.0.0/24', '192.168.1.0/24'],
  subnetRoutes: ['10.0.0.0/24'],
  ephemeral: false,
};

/**
 * writeServeConfig writes `dir/config.yaml` for a test server on loopback with
 * ephemeral ports and its data under `dir/data`; `lines` adds or overrides keys.
 */
export function writeServeConfig(dir: string, lines: string[]): string {
  const path = `${dir}/config.yaml`;
  writeFileSync(path, [
    'listen_addr: 127.0.0.1:0',
    'metrics_listen_addr: ""',
    'grpc_listen_addr: ""',
    'derp:',
    '  server:',
    '    stun_listen_addr: 127.0.0.1:0',
    `data_dir: ${dir}/data`,
    ...lines,
    '',
  ].join('\n'));
  return path;
}
