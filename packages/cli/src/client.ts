import http from 'node:http';
import https from 'node:https';
import { formatProblem, loadConfig, type HeadwayConfig } from '@headway/core/ports';
import type { AnswerCheck, ApiPath, ApiProblem } from './api-types.js';

/** ApiTarget says where the server's API is: the local unix socket, or an HTTP(S) address with an API key. */
export type ApiTarget =
  | { kind: 'socket'; socketPath: string }
  | { kind: 'http'; address: string; apiKey: string; insecure: boolean };

/** ApiError is a failure the server reported; its message is the problem's `detail` (or title). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly problem: ApiProblem | null,
  ) {
    super(message);
    this.name = 'ApiError';
  }

  /** code is the machine-readable problem code, e.g. `not_found`, when the server sent one. */
  get code(): string | undefined {
    return this.problem?.code;
  }
}

/** ConnectionError means no server answered at the target; the message names the socket or address tried. */
export class ConnectionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConnectionError';
  }
}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** ApiClient sends JSON requests to the server's /api/v1 and returns the parsed JSON answer. */
export class ApiClient {
  constructor(
    readonly target: ApiTarget,
    readonly timeoutMs = 10_000,
  ) {}

  /** describe names the target for error messages, e.g. `unix socket /var/lib/headway/headway.sock`. */
  describe(): string {
    return this.target.kind === 'socket' ? `unix socket ${this.target.socketPath}` : this.target.address;
  }

  // The path must be one of the API's (from the generated api-schema.ts), and the answer
  // type a caller expects must fit what some operation of that method sends.
  get<T>(path: ApiPath<'get'>, query?: Record<string, string | undefined>, ..._check: AnswerCheck<'get', T>): Promise<T> {
    return this.request<T>('GET', withQuery(path, query));
  }

  post<T>(path: ApiPath<'post'>, body?: unknown, query?: Record<string, string | undefined>, ..._check: AnswerCheck<'post', T>): Promise<T> {
    return this.request<T>('POST', withQuery(path, query), body);
  }

  put<T>(path: ApiPath<'put'>, body?: unknown, ..._check: AnswerCheck<'put', T>): Promise<T> {
    return this.request<T>('PUT', path, body);
  }

  delete<T>(path: ApiPath<'delete'>, query?: Record<string, string | undefined>, ..._check: AnswerCheck<'delete', T>): Promise<T> {
    return this.request<T>('DELETE', withQuery(path, query));
  }

  /** request sends one call; any non-2xx answer becomes an ApiError carrying the problem's detail. */
  request<T>(method: HttpMethod, path: string, body?: unknown): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { accept: 'application/json, application/problem+json' };
    if (payload) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(payload.length);
    }
    let options: http.RequestOptions;
    let transport: typeof http | typeof https = http;
    if (this.target.kind === 'socket') {
      options = { socketPath: this.target.socketPath, path, method, headers };
    } else {
      const url = new URL(path.replace(/^\//, ''), this.target.address.endsWith('/') ? this.target.address : this.target.address + '/');
      if (this.target.apiKey) headers.authorization = `Bearer ${this.target.apiKey}`;
      transport = url.protocol === 'https:' ? https : http;
      options = { method, headers, hostname: url.hostname.replace(/^\[|\]$/g, ''), port: url.port || undefined, path: url.pathname + url.search };
      if (url.protocol === 'https:' && this.target.insecure) (options as https.RequestOptions).rejectUnauthorized = false;
    }
    return new Promise<T>((resolve, reject) => {
      const req = transport.request(options, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (e) => reject(new ConnectionError(`reading the answer from ${this.describe()}: ${e.message}`)));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          let parsed: unknown = undefined;
          if (text.trim() !== '') {
            try {
              parsed = JSON.parse(text);
            } catch {
              parsed = undefined;
            }
          }
          if (status >= 200 && status < 300) {
            if (parsed === undefined && text.trim() !== '') {
              reject(new ApiError(`the server at ${this.describe()} answered ${method} ${path} with non-JSON content`, status, null));
              return;
            }
            resolve((parsed ?? {}) as T);
            return;
          }
          reject(problemError(status, parsed, text));
        });
      });
      req.setTimeout(this.timeoutMs, () => {
        req.destroy(new ConnectionError(`no answer from ${this.describe()} within ${this.timeoutMs} ms`));
      });
      req.on('error', (e: NodeJS.ErrnoException) => {
        if (e instanceof ConnectionError) return reject(e);
        reject(new ConnectionError(connectionMessage(this, e)));
      });
      req.end(payload);
    });
  }
}

function withQuery(path: string, query?: Record<string, string | undefined>): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, v);
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

function problemError(status: number, parsed: unknown, text: string): ApiError {
  if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
    const p = parsed as ApiProblem;
    const message = p.detail || p.title;
    if (message) return new ApiError(oneLine(message), status, p);
  }
  const snippet = oneLine(text).slice(0, 200);
  return new ApiError(`the server answered HTTP ${status}${snippet ? `: ${snippet}` : ''}`, status, null);
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, ' ').trim();
}

function connectionMessage(client: ApiClient, e: NodeJS.ErrnoException): string {
  const where = client.describe();
  switch (e.code) {
    case 'ENOENT':
    case 'ECONNREFUSED':
      return client.target.kind === 'socket'
        ? `cannot reach the headway server at ${where} (${e.code}); is \`headway serve\` running, or set cli.address to reach a remote server?`
        : `cannot reach the headway server at ${where} (${e.code})`;
    case 'EACCES':
      return `permission denied opening ${where}; run as a user in the socket's group`;
    default:
      return `cannot reach the headway server at ${where}: ${e.message}`;
  }
}

/** targetFromConfig picks the remote address when cli.address is set, else the local unix socket (no key needed). */
export function targetFromConfig(config: HeadwayConfig): ApiTarget {
  const address = config.cli.address.trim();
  if (address) {
    if (!/^https?:\/\//i.test(address)) {
      throw new Error(`cli.address must start with http:// or https://, got ${JSON.stringify(address)}`);
    }
    return { kind: 'http', address, apiKey: config.cli.api_key, insecure: config.cli.insecure };
  }
  return { kind: 'socket', socketPath: config.unix_socket };
}

/**
 * clientFromConfigFile loads the config (`path` from -c, else the usual search path and
 * HEADWAY_* environment) and builds a client. Only problems that affect reaching the
 * server stop it: a config file that is missing or unreadable, or bad cli.* / unix_socket keys.
 */
export function clientFromConfigFile(path?: string): ApiClient {
  const { config, problems } = loadConfig(path ? { path } : {});
  const blocking = problems.filter(
    (p) => p.level !== 'warn' && (p.key === '' || p.key.includes('cli.') || p.key.includes('unix_socket') || p.key.startsWith('HEADWAY_CLI')),
  );
  if (blocking.length) throw new Error(blocking.map(formatProblem).join('; '));
  return new ApiClient(targetFromConfig(config), config.cli.timeout || 10_000);
}
