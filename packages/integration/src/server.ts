import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, resolveConfig, type HeadwayConfig, type Logger, type PolicyEngine } from '@headway/core';
import { startServer, type RunningServer } from '@headway/server';
import { testDatabaseServers } from '@headway/storage-sql/testing';

export interface TestServer extends RunningServer {
  dataDir: string;
  logs: string[];
  /** stop closes the server; remove also deletes its data directory. */
  stop(opts?: { remove?: boolean }): Promise<void>;
}

/**
 * startTestServer runs the real server on ephemeral loopback ports with its own
 * data directory (SQLite by default), collecting log lines for assertions.
 */
export async function startTestServer(raw: Record<string, unknown> = {}, opts: { dataDir?: string; env?: NodeJS.ProcessEnv; engine?: PolicyEngine; logLevel?: 'trace' | 'debug' } = {}): Promise<TestServer> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'headway-test-'));
  const merged = {
    listen_addr: '127.0.0.1:0',
    metrics_listen_addr: '127.0.0.1:0',
    // The gRPC API is on by default (127.0.0.1:50443); tests that want it pass an ephemeral address.
    grpc_listen_addr: '',
    data_dir: dataDir,
    ...raw,
  } as Record<string, unknown>;
  // The embedded relay is on by default; tests run in parallel, so STUN takes any free port.
  const derp = (merged.derp ?? {}) as { server?: Record<string, unknown> };
  merged.derp = { ...derp, server: { stun_listen_addr: '127.0.0.1:0', ...(derp.server ?? {}) } };
  const { config, problems } = resolveConfig(merged, { env: opts.env ?? {}, baseDir: dataDir });
  const bad = problems.filter((p) => p.level !== 'warn');
  if (bad.length) throw new Error(`test config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
  const logs: string[] = [];
  const logger: Logger = createLogger({ level: opts.logLevel ?? 'debug', write: (l) => logs.push(l) });
  // The server URL must be the real port; a fixed one is picked after listening, so bind first. Between closing
  // and binding again another test's listener may take that port (tests run in parallel): then start over.
  let server = await startServer({ config, logger, configSource: 'test', engine: opts.engine });
  for (let attempt = 1; !raw.server_url; attempt++) {
    const url = server.urls.http;
    const port = new URL(url).port;
    await server.close();
    const again = resolveConfig({ ...merged, listen_addr: `127.0.0.1:${port}`, server_url: url }, { env: opts.env ?? {}, baseDir: dataDir });
    try {
      server = await startServer({ config: again.config as HeadwayConfig, logger, configSource: 'test', engine: opts.engine });
      break;
    } catch (err) {
      if (attempt >= 5 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      server = await startServer({ config, logger, configSource: 'test', engine: opts.engine });
    }
  }
  return Object.assign(server, {
    dataDir,
    logs,
    async stop(o: { remove?: boolean } = {}) {
      await server.close();
      if (o.remove !== false && !opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  });
}

/** adminFetch calls the API with an API key over TCP. */
export async function adminFetch(server: RunningServer, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(server.urls.http + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json: unknown;
  try { json = text ? JSON.parse(text) : undefined; } catch { json = text; }
  return { status: res.status, json };
}

/** ServerDatabase is one database server a test runs on; run gives `body` the `database` config block of a fresh, scratch database. */
export interface ServerDatabase {
  name: string;
  run(body: (database: Record<string, unknown>) => Promise<void>): Promise<void>;
}

/**
 * serverDatabases lists PostgreSQL and MariaDB (or only the `types` given) as `database` config
 * blocks for startTestServer (each run on its own scratch database). A server whose URL is not set
 * fails the test under CI=true, where `what` must run on it, and is skipped with the reason elsewhere.
 */
export function serverDatabases(t: { fail(msg: string): unknown; skip(msg: string, fn: () => void): unknown }, what: string, types?: string[]): ServerDatabase[] {
  const out: ServerDatabase[] = [];
  for (const server of testDatabaseServers()) {
    if (types && !types.includes(server.type)) continue;
    if (!server.admin) {
      if (process.env.CI === 'true') t.fail(`${server.type}: ${server.variable} is not set, and CI must run ${what} on ${server.type}`);
      else t.skip(`${server.type}: ${server.variable} not set`, () => undefined);
      continue;
    }
    out.push({
      name: server.type,
      run: (body) => server.scratch((c) => body({
        type: server.type,
        [server.type]: { host: c.host, port: c.port, name: c.database, user: c.user, pass: c.password ?? '' },
      })),
    });
  }
  return out;
}
