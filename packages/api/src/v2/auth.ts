import type { Context } from 'koa';
import { HeadwayError } from '@headway/core';
import type { ApiDeps } from '../route.js';
import { allows, scopeName, type Scope } from './scopes.js';

/** OAuthGrant is what a valid /api/v2 access token carries: its client, scopes and the tags that client may assign. */
export interface OAuthGrant { clientId: string; scopes: string[]; tags: string[] }

/** OAuthTokens verifies access tokens (OAuth clients); the server wires it, tests may leave it out. */
export interface OAuthTokens {
  verifyToken(token: string): Promise<OAuthGrant | null>;
}

/**
 * Principal is who a /api/v2 request acts as: an API key (every scope, as Tailscale's API
 * access tokens have), an OAuth token (its scopes and tags), the local socket, or an
 * administrator signed in to the console (every scope, like an API key).
 */
export type Principal =
  | { kind: 'apikey'; prefix: string }
  | { kind: 'local' }
  | { kind: 'console'; actor: string }
  | ({ kind: 'oauth' } & OAuthGrant);

/**
 * credential reads the secret a request carries as Tailscale's clients send it:
 * `Authorization: Bearer <secret>`, or basic auth with the secret as the user name
 * (the official client's API-key mode) and an empty password.
 */
export function credential(header: string): string | null {
  const bearer = /^Bearer\s+(\S+)$/i.exec(header);
  if (bearer) return bearer[1]!;
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header);
  if (!basic) return null;
  const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? decoded : decoded.slice(0, colon);
  return user || null;
}

/** authenticateV2 resolves a request's principal, or throws 401 with Tailscale's message shape. */
export async function authenticateV2(ctx: Context, deps: ApiDeps, trusted: boolean): Promise<Principal> {
  if (trusted) return { kind: 'local' };
  const header = ctx.get('authorization');
  if (!header && deps.consoleAuth) {
    const console = await deps.consoleAuth(ctx);
    if (console && 'status' in console) throw new HeadwayError(console.code, console.message);
    if (console) return { kind: 'console', actor: console.actor };
  }
  const secret = credential(header);
  if (!secret) throw new HeadwayError('unauthorized', header ? 'malformed Authorization header; expected Bearer <API key or access token> or basic auth with the key as user name' : 'API token invalid');
  const key = await deps.state.keys.authenticateApiKey(secret);
  if (key) return { kind: 'apikey', prefix: key.prefix };
  const grant = await deps.oauth?.verifyToken(secret);
  if (grant) return { kind: 'oauth', ...grant };
  throw new HeadwayError('unauthorized', 'API token invalid');
}

/** actorOf names a principal as the audit log records it. */
export function actorOf(p: Principal): string {
  switch (p.kind) {
    case 'apikey': return `apikey:${p.prefix}`;
    case 'oauth': return `oauth:${p.clientId}`;
    case 'console': return p.actor;
    case 'local': return 'socket';
  }
}

/** requireScope refuses (403) a principal whose scopes do not cover what a route needs. */
export function requireScope(principal: Principal, need: Scope): void {
  if (principal.kind !== 'oauth') return;
  if (!allows(principal.scopes, need)) {
    throw new HeadwayError('forbidden', `this token's scopes (${principal.scopes.join(' ') || 'none'}) do not include ${scopeName(need)}`);
  }
}

/**
 * checkAssignableTags refuses (403) tags an OAuth token's client may not assign; `kept` are
 * tags already in place (a device's own), which may stay. API keys and the local socket
 * assign any tag the policy allows.
 */
export function checkAssignableTags(p: Principal, tags: readonly string[], kept: readonly string[] = []): void {
  if (p.kind !== 'oauth') return;
  const others = tags.filter((t) => !p.tags.includes(t) && !kept.includes(t));
  if (others.length) throw new HeadwayError('forbidden', `this OAuth client may not assign ${others.join(', ')}; it may assign ${p.tags.join(', ') || 'no tags'}`);
}

/** principalOf is the principal the v2 router stored on the request. */
export function principalOf(ctx: Context): Principal {
  const p = (ctx.state as { principal?: Principal }).principal;
  if (!p) throw new Error('principalOf: the route ran without authenticateV2');
  return p;
}
