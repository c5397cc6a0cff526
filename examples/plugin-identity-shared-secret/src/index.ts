import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  IDENTITY, type AdapterDescriptor, type BrowserRequest, type IdentityPort, type LoginOutcome, type LoginStart, type Logger, type OptionProblem,
} from '@headway/core/ports';

/** PROVIDER is the login method's name, stored as the user's provider. */
export const PROVIDER = 'shared-secret';
/** CALLBACK_PATH is where the form page sends the browser back to Headway. */
export const CALLBACK_PATH = '/shared-secret/callback';
const STATE_COOKIE = 'headway_shared_secret_state';
/** LOGIN_TTL_MS bounds how long a person may take from the AuthURL to the callback. */
const LOGIN_TTL_MS = 10 * 60_000;
/** MAX_LOGINS bounds the logins kept in memory (each needs a waiting device login to create). */
const MAX_LOGINS = 1024;
const FORM_LIMIT = 4096;
const USER_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

interface Attempt { loginKey: string; expiresAt: number; verdict?: { ok: true; name: string } | { ok: false; who: string } }

/** SharedSecretOptions are this plugin's `options:` in its `plugins:` entry. */
export interface SharedSecretOptions {
  /** passphrase_path is a file holding the shared passphrase (read once at start-up; trailing newline ignored). */
  passphrase_path: string;
  /** listen is where the form page listens (`host:port`, default `127.0.0.1:0`: loopback, any free port). */
  listen?: string;
  /** url is the form page's address as browsers reach it (default: `http://<listen>`). */
  url?: string;
}

/**
 * SharedSecretLogin is an example identity adapter: whoever knows one shared
 * passphrase may log a device in under any user name they type. It is its own tiny
 * "provider" (a form page on a port of its own) because the identity port lets an
 * adapter send the browser somewhere and check its return, but not serve pages on
 * Headway's port: begin sends the browser to the form, the form checks the answer
 * and sends the browser back to the callback with only an opaque state, and
 * complete turns that state (bound to a cookie set by begin, so the login finishes
 * in the browser that started it) into a verified identity or a refusal.
 * For a lab only: a shared secret identifies nobody.
 */
export class SharedSecretLogin implements IdentityPort {
  readonly provider = PROVIDER;
  readonly callbackPath = CALLBACK_PATH;
  private digest?: Buffer;
  private server?: Server;
  private formUrl = '';
  private readonly attempts = new Map<string, Attempt>();

  constructor(private readonly o: { options: SharedSecretOptions; serverUrl: string; logger: Logger }) {}

  /** init reads the passphrase (keeping only its digest) and starts the form page. */
  async init(): Promise<void> {
    const passphrase = readFileSync(this.o.options.passphrase_path, 'utf8').replace(/\r?\n$/, '');
    if (!passphrase) throw new Error(`shared-secret: ${this.o.options.passphrase_path} is empty: write the passphrase in it`);
    this.digest = sha256(passphrase);
    const { host, port } = parseListen(this.o.options.listen ?? '127.0.0.1:0');
    const server = createServer((req, res) => { this.serve(req, res).catch(() => { if (!res.headersSent) res.writeHead(500); res.end(); }); });
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(port, host, () => resolve()); });
    this.server = server;
    const bound = server.address() as AddressInfo;
    this.formUrl = (this.o.options.url ?? `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`).replace(/\/$/, '');
    this.o.logger.info('shared-secret login form listening', { url: this.formUrl });
  }

  async begin(loginKey: string): Promise<LoginStart> {
    this.prune();
    if (this.attempts.size >= MAX_LOGINS) throw new Error('too many logins waiting');
    const state = randomBytes(32).toString('base64url');
    this.attempts.set(state, { loginKey, expiresAt: Date.now() + LOGIN_TTL_MS });
    return {
      location: `${this.formUrl}/login?state=${state}`,
      cookies: [{ name: STATE_COOKIE, value: state, maxAgeMs: LOGIN_TTL_MS, path: CALLBACK_PATH }],
    };
  }

  async complete(req: BrowserRequest): Promise<LoginOutcome> {
    const clear = [{ name: STATE_COOKIE, value: '', maxAgeMs: 0, path: CALLBACK_PATH }];
    const state = req.url.searchParams.get('state') ?? '';
    const cookie = req.cookies[STATE_COOKIE] ?? '';
    const attempt = state ? this.attempts.get(state) : undefined;
    if (!attempt || !sameText(state, cookie) || attempt.expiresAt <= Date.now()) {
      return { ok: false, status: 400, reason: 'This login is unknown, expired, or from another browser: run tailscale up on the device again.', cookies: clear };
    }
    this.attempts.delete(state);
    const v = attempt.verdict;
    if (!v) return { ok: false, status: 400, reason: 'The passphrase form was not answered.', loginKey: attempt.loginKey, cookies: clear };
    if (!v.ok) return { ok: false, status: 403, reason: 'The user name or passphrase is wrong.', loginKey: attempt.loginKey, who: v.who, cookies: clear };
    return {
      ok: true, loginKey: attempt.loginKey, cookies: clear,
      identity: { provider: PROVIDER, providerId: `${PROVIDER}/${v.name}`, email: '', username: v.name, displayName: v.name, profilePicUrl: '', groups: [] },
    };
  }

  providerIdFor(subject: string): string { return `${PROVIDER}/${subject}`; }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => { server.close(() => resolve()); server.closeAllConnections(); });
  }

  /** serve answers the form page: GET shows the form, POST records the verdict and returns the browser to Headway. */
  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://form');
    const state = url.searchParams.get('state') ?? '';
    const attempt = url.pathname === '/login' && state ? this.attempts.get(state) : undefined;
    if (!attempt || attempt.expiresAt <= Date.now()) return page(res, 404, '<h1>Unknown login</h1><p>This login is unknown or has expired: run tailscale up on the device again.</p>');
    if (req.method === 'GET') {
      return page(res, 200, `<h1>Log in to Headway</h1>
<form method="post" action="/login?state=${escapeHtml(state)}">
<p><label>User name <input name="login" autocomplete="username" required></label></p>
<p><label>Passphrase <input name="password" type="password" autocomplete="current-password" required></label></p>
<p><button type="submit">Log in</button></p>
</form>`);
    }
    if (req.method !== 'POST') return page(res, 405, '<h1>Method not allowed</h1>');
    const form = await readForm(req);
    if (!form) return page(res, 400, '<h1>Bad request</h1><p>Expected a small form.</p>');
    const name = (form.get('login') ?? '').trim().toLowerCase();
    const right = sameDigest(sha256(form.get('password') ?? ''), this.digest!);
    if (!USER_NAME.test(name)) {
      return page(res, 400, '<h1>Bad user name</h1><p>A user name is 1 to 63 of a-z, 0-9, dot, dash and underscore, starting with a letter or digit.</p>');
    }
    attempt.verdict = right ? { ok: true, name } : { ok: false, who: name };
    res.writeHead(303, { Location: `${this.o.serverUrl.replace(/\/$/, '')}${CALLBACK_PATH}?state=${state}`, 'Cache-Control': 'no-store' });
    res.end();
  }

  private prune(): void {
    const now = Date.now();
    for (const [k, v] of this.attempts) if (v.expiresAt <= now) this.attempts.delete(k);
  }
}

function sha256(text: string): Buffer { return createHash('sha256').update(text, 'utf8').digest(); }

/** sameDigest compares two sha256 digests in constant time (equal lengths by construction). */
function sameDigest(a: Buffer, b: Buffer): boolean { return timingSafeEqual(a, b); }

function sameText(a: string, b: string): boolean { return sameDigest(sha256(a), sha256(b)); }

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'Content-Type': 'text/html; charset=utf-8',
    'Content-Security-Policy': "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-store',
  });
  res.end(`<!doctype html><html><head><meta charset="utf-8"><title>Headway login</title></head><body>${body}</body></html>`);
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams | undefined> {
  if (!(req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded')) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > FORM_LIMIT) return undefined;
    chunks.push(c as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function parseListen(listen: string): { host: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d{1,5})$/.exec(listen);
  if (!m || Number(m[2]) > 65535) throw new Error(`shared-secret: listen ${JSON.stringify(listen)} is not host:port`);
  return { host: m[1]!, port: Number(m[2]) };
}

const OPTIONS = ['passphrase_path', 'listen', 'url'];

const descriptor: AdapterDescriptor<SharedSecretOptions> = {
  port: 'identity',
  id: 'shared-secret',
  // validate names every bad option; Headway runs it at start-up and in `headway config check`.
  validate(options) {
    const problems: OptionProblem[] = [];
    for (const key of Object.keys(options)) {
      if (!OPTIONS.includes(key)) problems.push({ option: key, message: `unknown option (this plugin takes: ${OPTIONS.join(', ')})` });
    }
    if (options.passphrase_path === undefined) problems.push({ option: 'passphrase_path', message: 'required: a file holding the shared passphrase' });
    else if (typeof options.passphrase_path !== 'string' || !options.passphrase_path) problems.push({ option: 'passphrase_path', message: `expected a file path, found ${JSON.stringify(options.passphrase_path)}` });
    if (options.listen !== undefined && (typeof options.listen !== 'string' || !/^\[?[^\]]*\]?:\d{1,5}$/.test(options.listen))) {
      problems.push({ option: 'listen', message: `expected host:port, found ${JSON.stringify(options.listen)}` });
    }
    if (options.url !== undefined && (typeof options.url !== 'string' || !/^https?:\/\/[^/]/.test(options.url))) {
      problems.push({ option: 'url', message: `expected an http(s) URL, found ${JSON.stringify(options.url)}` });
    }
    return problems;
  },
  register({ container, config, logger, options }) {
    const plugin = new SharedSecretLogin({ options: options!, serverUrl: config.server_url, logger });
    container.register(IDENTITY, { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;
