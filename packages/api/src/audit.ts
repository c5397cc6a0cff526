import type { Context } from 'koa';
import { z } from 'zod';
import type { AuditRecord } from '@headway/core';
import { numericId, queryText, Time } from './schemas.js';
import { route, type ApiDeps, type Route } from './route.js';

/*
 * The audit log as the API layers feed and read it: every change made through /api/v1, /api/v2 or headscale's
 * gRPC service is recorded after it succeeded (who, which operation, what it named, from where); reads and checks
 * are not. Bodies are never recorded: they may carry secrets.
 */

/** SECRET_FIELDS are request and answer fields a target never shows. */
const SECRET_FIELDS = new Set(['key', 'secret', 'policy', 'apiKey', 'api_key', 'clientSecret', 'access_token']);

const short = (v: unknown): string | undefined =>
  (typeof v === 'string' && v.length <= 80) || typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined;

/** describeFields names what scalar fields of an object say (`id=3 newName=web`), leaving out secrets. */
export function describeFields(fields: Record<string, unknown>): string {
  return Object.entries(fields).flatMap(([k, v]) => {
    const text = SECRET_FIELDS.has(k) ? undefined : short(v);
    return text === undefined ? [] : [`${k}=${text}`];
  }).join(' ');
}

/**
 * auditTarget says what a change named: its path parameters, or else what its answer holds: the resource itself
 * (`id=k123`) or the resources in it (`user 5 (alice)`), as answers carry what a create made.
 */
export function auditTarget(params: Record<string, unknown>, answer: unknown): string {
  const fromParams = describeFields(params);
  if (fromParams) return fromParams;
  if (!answer || typeof answer !== 'object') return '';
  // An answer that is the resource itself (Tailscale's API answers a key or a device so).
  const top = answer as Record<string, unknown>;
  const topId = short(top.id);
  if (topId !== undefined) return `id=${topId}${short(top.name) !== undefined ? ` name=${short(top.name)}` : ''}`;
  return Object.entries(top).flatMap(([k, v]) => {
    if (!v || typeof v !== 'object' || Array.isArray(v)) return [];
    const o = v as Record<string, unknown>;
    const id = short(o.id);
    if (id === undefined) return [];
    const name = short(o.name) ?? short(o.givenName);
    return [`${k} ${id}${name !== undefined ? ` (${name})` : ''}`];
  }).join(', ');
}

/** setActor is where the authenticating middleware leaves who the request acts as (actorIn reads it). */
export const setActor = (ctx: Context, actor: string) => { ctx.state.actor = actor; };
const actorIn = (ctx: Context): string => (ctx.state as { actor?: string }).actor ?? 'unknown';

/** changes says whether a route is recorded: anything but GET, unless it only checks or previews (readOnly). */
export const changes = (r: Route): boolean => r.method !== 'GET' && !r.readOnly;

/** recordRoute records a route's change after it succeeded; `remote` is the client as the request log names it. */
export function recordRoute(deps: ApiDeps, ctx: Context, r: Route, answer: unknown, remote: string | undefined): Promise<void> {
  if (!deps.audit || !changes(r) || ctx.status >= 400) return Promise.resolve();
  return deps.audit.record({ actor: actorIn(ctx), action: r.operationId, target: auditTarget({ ...ctx.params }, answer), remote: remote ?? '' });
}

/** recordCall records a gRPC call's change after it succeeded. */
export function recordCall(deps: ApiDeps, entry: AuditRecord): Promise<void> {
  return deps.audit ? deps.audit.record(entry) : Promise.resolve();
}

const AuditEntrySchema = z.object({
  id: z.string().meta({ description: 'Entry id (decimal); newer entries have larger ids', examples: ['42'] }),
  at: Time,
  actor: z.string().meta({ description: 'Who: apikey:<prefix>, oauth:<client id>, socket (the local admin socket)', examples: ['apikey:0123456789ab'] }),
  action: z.string().meta({ description: 'The operation (the OpenAPI operationId, or the gRPC method)', examples: ['renameNode'] }),
  target: z.string().meta({ description: 'What it named: path parameters, or what the answer held', examples: ['id=3 newName=web'] }),
  remote: z.string().meta({ description: "The client's address (trusted_proxies applied); empty over the local socket", examples: ['192.0.2.10'] }),
}).meta({ id: 'AuditEntry', description: 'One administrative change' });

export const AUDIT_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v1/audit', operationId: 'listAuditEntries', tag: 'Audit', summary: 'The audit log',
    description: 'Changes made through /api/v1, /api/v2 and gRPC, newest first (reads and checks are not recorded). Page with `before` (the last id you have).',
    query: z.object({
      limit: z.string().regex(/^\d+$/, 'expected a number').transform(Number).pipe(z.number().int().min(1).max(1000)).optional()
        .meta({ description: 'At most this many entries (1-1000, default 100)', examples: ['100'] }),
      before: numericId('Only entries older than this id').optional(),
      actor: queryText('Only entries of this actor', 'apikey:0123456789ab'),
      action: queryText('Only entries of this operation', 'renameNode'),
    }),
    response: z.object({ entries: z.array(AuditEntrySchema), persistent: z.boolean().meta({ description: 'false: the storage keeps no audit log and entries live in memory until a restart' }) }),
    responseDescription: 'The entries',
    handle: async ({ query }, deps) => {
      if (!deps.audit) return { entries: [], persistent: false };
      const entries = await deps.audit.list({ limit: query.limit ?? 100, before: query.before, actor: query.actor, action: query.action });
      return { entries: entries.map((e) => ({ ...e, id: String(e.id), at: e.at.toISOString() })), persistent: deps.audit.persistent };
    },
  }),
];
