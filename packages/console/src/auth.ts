import type { Context } from 'koa';
import { ConsoleSessions, type ConsoleSession } from '@headway/core';

/**
 * cookieName: under https the cookie is `__Host-` prefixed (the browser then insists on Secure, Path=/ and no Domain,
 * so no sibling host can plant one); over plain http (a server on 127.0.0.1 behind nothing) it cannot be.
 */
export function cookieName(secure: boolean): string {
  return secure ? '__Host-headway-admin' : 'headway-admin';
}

/** sessionCookie is the Set-Cookie value that opens (value) or clears (empty) the console session. */
export function sessionCookie(secure: boolean, value: string, maxAgeSeconds: number): string {
  const parts = [`${cookieName(secure)}=${value}`, 'Path=/', 'HttpOnly', 'SameSite=Strict', `Max-Age=${value ? maxAgeSeconds : 0}`];
  if (secure) parts.push('Secure');
  return parts.join('; ');
}

/** readCookie finds the console's cookie in a request's Cookie header. */
export function readCookie(ctx: Context, secure: boolean): string | undefined {
  const name = cookieName(secure);
  for (const part of (ctx.get('cookie') || '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** SAFE: methods that change nothing and so need no CSRF token. */
const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

/** ConsoleAuthResult: a session's actor, or why the request is refused. */
export type ConsoleAuthResult = { actor: string; session: ConsoleSession } | { status: 403; code: 'csrf_failed'; message: string };

/**
 * authenticateConsole recognises a request made by the console's pages: the session cookie names a live session, and
 * a change also carries that session's CSRF token in `x-csrf-token` (a form or a script on another site cannot set the
 * header; SameSite=Strict keeps the cookie off cross-site requests besides). Undefined: no console session (the caller
 * goes on to its own credentials or 401).
 */
export async function authenticateConsole(ctx: Context, sessions: ConsoleSessions, secure: boolean): Promise<ConsoleAuthResult | undefined> {
  const session = await sessions.check(readCookie(ctx, secure));
  if (!session) return undefined;
  if (ctx.get('sec-fetch-site') === 'cross-site') return { status: 403, code: 'csrf_failed', message: 'a console session is not accepted from another site' };
  if (!SAFE.has(ctx.method) && !ConsoleSessions.csrfMatches(session, ctx.get('x-csrf-token') || undefined)) {
    return { status: 403, code: 'csrf_failed', message: 'missing or wrong x-csrf-token header for this console session' };
  }
  return { actor: `console:${session.admin}`, session };
}

/**
 * sameOrigin says whether a form post came from this server's own pages: Sec-Fetch-Site (sent by every current
 * browser) says same-origin, or, from a browser without it, the Origin header is the server's.
 */
export function sameOrigin(ctx: Context, serverUrl: string): boolean {
  const site = ctx.get('sec-fetch-site');
  if (site) return site === 'same-origin';
  const origin = ctx.get('origin');
  return origin !== '' && (origin === new URL(serverUrl).origin || origin === `${ctx.protocol}://${ctx.host}`);
}
