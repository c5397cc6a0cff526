/*
 * console-http.ts: reaching the admin console without a browser, as an attacker or a test would: raw requests that
 * carry (or leave out) the session cookie and the CSRF header, a link sign-in over HTTP, and the list of every /admin
 * route the console package declares.
 */
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import { signInLink, type ConsoleServer } from './console.js';
import { repoRoot } from './tailscale.js';

export interface RawAnswer { status: number; headers: http.IncomingHttpHeaders; text: string }

/** rawRequest sends one request (https without checking the test certificate) and reads the whole answer. */
export function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<RawAnswer> {
  const u = new URL(url);
  const send = u.protocol === 'https:' ? https.request : http.request;
  return new Promise((resolve, reject) => {
    const headers = { ...opts.headers, ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}) };
    const req = send(u, { method: opts.method ?? 'GET', headers, rejectUnauthorized: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** LinkSession is a console session opened over HTTP: the Cookie header to send, its parts, and the CSRF token. */
export interface LinkSession { cookie: string; value: string; setCookie: string; csrf: string; token: string }

/** linkSession signs `admin` in by a link made over the admin socket, as the sign-in page's form would post it. */
export async function linkSession(server: ConsoleServer, admin = 'tester'): Promise<LinkSession> {
  const link = new URL(await signInLink(server, admin));
  const token = link.searchParams.get('token')!;
  const answer = await rawRequest(new URL('/admin/signin', link).toString(), {
    method: 'POST', body: new URLSearchParams({ token }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
  });
  const setCookie = [answer.headers['set-cookie'] ?? []].flat().find((c) => /headway-admin=[^;]/.test(c));
  if (answer.status !== 303 || !setCookie) throw new Error(`link sign-in: ${answer.status} ${answer.text.slice(0, 200)}`);
  const cookie = setCookie.split(';')[0]!;
  const session = await rawRequest(new URL('/admin/session', link).toString(), { headers: { cookie } });
  const csrf = (JSON.parse(session.text) as { csrf: string }).csrf;
  return { cookie, value: cookie.slice(cookie.indexOf('=') + 1), setCookie, csrf, token };
}

/** ConsoleRoute is one route the console package declares under /admin. */
export interface ConsoleRoute { method: string; path: string }

/**
 * consoleRoutes lists the /admin routes declared in packages/console/src (router.get/post/... with a literal path or a
 * constant declared in the package), so a route added later is walked by the security tests without being listed.
 */
export function consoleRoutes(): ConsoleRoute[] {
  const dir = join(repoRoot(), 'packages', 'console', 'src');
  const sources = readdirSync(dir).filter((f) => f.endsWith('.ts')).map((f) => readFileSync(join(dir, f), 'utf8'));
  const constants = new Map<string, string>();
  for (const text of sources) for (const m of text.matchAll(/const (\w+) = '([^']+)'/g)) constants.set(m[1]!, m[2]!);
  const routes: ConsoleRoute[] = [];
  for (const text of sources) {
    for (const m of text.matchAll(/router\.(get|post|put|patch|delete)\(\s*(?:'([^']+)'|(\w+))/g)) {
      const path = m[2] ?? constants.get(m[3]!);
      if (!path) throw new Error(`console route ${m[0]}: its path is neither a literal nor a constant of the package`);
      if (path.startsWith('/admin')) routes.push({ method: m[1]!.toUpperCase(), path });
    }
  }
  return routes;
}
