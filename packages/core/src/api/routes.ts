import type { Context } from 'koa';
import { randomBytes } from 'node:crypto';
import { badField, HeadwayError } from '../errors.js';
import type { HeadwayConfig } from '../config/schema.js';
import { parseDuration } from '../config/duration.js';
import type { State } from '../state/state.js';
import { canonicalRoutes } from '../state/names.js';
import type { PolicyService } from '../policy/service.js';
import { readJson } from './http.js';
import { apiKeyView, nodeView, preAuthKeyView, userView } from './views.js';

export interface ApiDeps {
  state: State;
  policy: PolicyService;
  config: HeadwayConfig;
  /** registerPending approves an interactive registration (wired by the control protocol). */
  registerPending?: (key: string, userId: number) => Promise<number>;
  /** providerIdFor turns a bare subject into the configured login method's provider identity (users link). */
  providerIdFor?: (subject: string) => { provider: string; providerId: string };
  /** primaryRoutes: routes a node is the primary router for (from the route manager). */
  primaryRoutes?: (nodeId: number) => string[];
  health: () => Promise<boolean>;
}

export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** path in koa form, e.g. /api/v1/node/:id */
  path: string;
  summary: string;
  body?: Record<string, string>;
  query?: Record<string, string>;
  response: string;
  handler: (ctx: Context, deps: ApiDeps) => Promise<unknown>;
}

function idParam(ctx: Context, name = 'id'): number {
  const raw = String(ctx.params[name] ?? '');
  if (!/^\d+$/.test(raw)) throw badField(name, `expected a numeric id, found ${JSON.stringify(raw)}`);
  return Number(raw);
}

function str(body: Record<string, unknown>, field: string, required = false): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) {
    if (required) throw badField(field, 'is required');
    return undefined;
  }
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
  if (typeof v !== 'string') throw badField(field, `expected a string, found ${typeof v}`);
  return v;
}

function bool(body: Record<string, unknown>, field: string): boolean | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badField(field, `expected true or false, found ${JSON.stringify(v)}`);
  return v;
}

function strList(body: Record<string, unknown>, field: string): string[] | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw badField(field, 'expected a list of strings');
  return v as string[];
}

/** expiration accepts an RFC 3339 time or a duration from now (`24h`); null/absent means none. */
function expiration(body: Record<string, unknown>, field = 'expiration'): Date | null {
  const v = str(body, field);
  if (!v) return null;
  const d = parseDuration(v);
  if (d !== undefined) return new Date(Date.now() + d);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(v) || Number.isNaN(Date.parse(v))) {
    throw badField(field, `expected an RFC 3339 time or a duration such as 24h, found ${JSON.stringify(v)}`);
  }
  return new Date(v);
}

const userRef = (deps: ApiDeps, ref: string | undefined, field = 'user') => deps.state.resolveUser(ref ?? '', field);

export const ROUTES: Route[] = [
  // ---- users ----
  {
    method: 'GET', path: '/api/v1/user', summary: 'List users', query: { id: 'user id', name: 'user name', email: 'e-mail' }, response: '{users: User[]}',
    handler: async (ctx, { state }) => {
      const q = ctx.query as Record<string, string | undefined>;
      if (q.id !== undefined && !/^\d+$/.test(q.id)) throw badField('id', `expected a numeric id, found ${JSON.stringify(q.id)}`);
      return { users: state.listUsers({ id: q.id ? Number(q.id) : undefined, name: q.name || undefined, email: q.email || undefined }).map(userView) };
    },
  },
  {
    method: 'POST', path: '/api/v1/user', summary: 'Create a user', body: { name: 'string (required)', displayName: 'string', email: 'string' }, response: '{user: User}',
    handler: async (ctx, { state }) => {
      const b = await readJson(ctx);
      const user = await state.createUser({ name: str(b, 'name', true)!, displayName: str(b, 'displayName') ?? '', email: str(b, 'email') ?? '' });
      return { user: userView(user) };
    },
  },
  {
    method: 'POST', path: '/api/v1/user/:id/rename/:newName', summary: 'Rename a user', response: '{user: User}',
    handler: async (ctx, { state }) => ({ user: userView(await state.renameUser(idParam(ctx), String(ctx.params.newName))) }),
  },
  {
    method: 'POST', path: '/api/v1/user/:id/link', summary: 'Link a user to an identity-provider identity, so that person\'s logins land on this user',
    body: { subject: 'the provider\'s subject (sub claim) (required)', issuer: 'issuer URL (default: oidc.issuer)', provider: 'provider name (default: oidc)' }, response: '{user: User}',
    handler: async (ctx, deps) => {
      const b = await readJson(ctx);
      const subject = str(b, 'subject', true)!.trim();
      const issuer = str(b, 'issuer')?.trim();
      if (!subject) throw badField('subject', 'must not be empty');
      let link: { provider: string; providerId: string };
      if (issuer) {
        if (!/^https?:\/\/\S+$/.test(issuer)) throw badField('issuer', `expected an http(s) URL, found ${JSON.stringify(issuer)}`);
        link = { provider: str(b, 'provider') ?? 'oidc', providerId: `${issuer.replace(/\/+$/, '')}/${subject.replace(/^\/+/, '')}` };
      } else if (deps.providerIdFor) {
        link = deps.providerIdFor(subject);
      } else {
        throw badField('issuer', 'no identity provider is configured (oidc.issuer); pass the issuer URL');
      }
      return { user: userView(await deps.state.linkUser(idParam(ctx), link.provider, link.providerId)) };
    },
  },
  {
    method: 'DELETE', path: '/api/v1/user/:id', summary: 'Delete a user and its pre-auth keys (409 while it owns nodes, as in headscale)', response: '{}',
    handler: async (ctx, { state }) => {
      await state.deleteUser(idParam(ctx));
      return {};
    },
  },
  // ---- nodes ----
  {
    method: 'GET', path: '/api/v1/node', summary: 'List nodes', query: { user: 'user name or id' }, response: '{nodes: Node[]}',
    handler: async (ctx, deps) => {
      const u = ctx.query.user ? userRef(deps, String(ctx.query.user)) : undefined;
      return { nodes: deps.state.listNodes({ userId: u?.id }).map((n) => nodeView(n, deps.state, deps.primaryRoutes && ((x) => deps.primaryRoutes!(x.id)))) };
    },
  },
  {
    method: 'GET', path: '/api/v1/node/:id', summary: 'Get a node', response: '{node: Node}',
    handler: async (ctx, deps) => ({ node: view(deps, deps.state.requireNode(idParam(ctx))) }),
  },
  {
    method: 'DELETE', path: '/api/v1/node/:id', summary: 'Delete a node', response: '{}',
    handler: async (ctx, { state }) => { await state.deleteNode(idParam(ctx)); return {}; },
  },
  {
    method: 'POST', path: '/api/v1/node/:id/rename/:newName', summary: 'Rename a node (its display name only)', response: '{node: Node}',
    handler: async (ctx, deps) => ({ node: view(deps, await deps.state.renameNode(idParam(ctx), String(ctx.params.newName))) }),
  },
  {
    method: 'POST', path: '/api/v1/node/:id/expire', summary: 'Expire a node key now', response: '{node: Node}',
    handler: async (ctx, deps) => ({ node: view(deps, await deps.state.expireNode(idParam(ctx))) }),
  },
  {
    method: 'POST', path: '/api/v1/node/:id/tags', summary: 'Replace the tags of a node', body: { tags: 'string[] (tag:<name>)' }, response: '{node: Node}',
    handler: async (ctx, deps) => {
      const id = idParam(ctx);
      const b = await readJson(ctx);
      const tags = strList(b, 'tags');
      if (!tags) throw badField('tags', 'is required (an empty list removes all tags)');
      await deps.policy.checkTagsAllowed(tags);
      return { node: view(deps, await deps.state.setTags(id, tags)) };
    },
  },
  {
    method: 'POST', path: '/api/v1/node/:id/approve_routes', summary: 'Replace the approved routes of a node', body: { routes: 'string[] (CIDR)' }, response: '{node: Node}',
    handler: async (ctx, deps) => {
      const id = idParam(ctx);
      const b = await readJson(ctx);
      const routes = strList(b, 'routes');
      if (!routes) throw badField('routes', 'is required (an empty list removes all approvals)');
      return { node: view(deps, await deps.state.approveRoutes(id, routes)) };
    },
  },
  {
    method: 'POST', path: '/api/v1/node/register', summary: 'Approve an interactive registration', query: { user: 'user name or id', key: 'registration key from the AuthURL' }, response: '{node: Node}',
    handler: async (ctx, deps) => {
      const user = userRef(deps, ctx.query.user ? String(ctx.query.user) : undefined);
      const key = String(ctx.query.key ?? '').trim();
      if (!key) throw badField('key', 'is required');
      if (!deps.registerPending) throw new HeadwayError('unavailable', 'interactive registration is not available');
      const nodeId = await deps.registerPending(key, user.id);
      return { node: view(deps, deps.state.requireNode(nodeId)) };
    },
  },
  {
    method: 'POST', path: '/api/v1/node/backfillips', summary: 'Give every node an address of each enabled family', response: '{changes: string[]}',
    handler: async (_ctx, { state }) => ({
      changes: (await state.backfillIPs()).map((n) => `node ${n.givenName}: ${[n.ipv4, n.ipv6].filter(Boolean).join(', ')}`),
    }),
  },
  {
    method: 'POST', path: '/api/v1/debug/node', summary: 'Create a node record without a device (tests and demos)', body: { user: 'user name or id (required)', key: 'machine key (optional)', name: 'hostname (required)', routes: 'string[]' }, response: '{node: Node}',
    handler: async (ctx, deps) => {
      const b = await readJson(ctx);
      const user = userRef(deps, str(b, 'user', true));
      const name = str(b, 'name', true)!;
      if (!name.trim()) throw badField('name', 'must not be empty');
      const routes = strList(b, 'routes') ?? [];
      const key = str(b, 'key');
      if (key !== undefined && !/^mkey:[0-9a-f]{64}$/.test(key)) throw badField('key', `expected mkey:<64 hex digits>, found ${JSON.stringify(key)}`);
      const node = await deps.state.createNode({
        machineKey: key ?? `mkey:${randomBytes(32).toString('hex')}`,
        nodeKey: `nodekey:${randomBytes(32).toString('hex')}`,
        discoKey: `discokey:${randomBytes(32).toString('hex')}`,
        hostname: name, userId: user.id, registerMethod: 'debug',
        availableRoutes: canonicalRoutes(routes),
      });
      return { node: view(deps, node) };
    },
  },
  // ---- pre-auth keys ----
  {
    method: 'GET', path: '/api/v1/preauthkey', summary: 'List pre-auth keys', query: { user: 'user name or id' }, response: '{preAuthKeys: PreAuthKey[]}',
    handler: async (ctx, deps) => {
      const u = ctx.query.user ? userRef(deps, String(ctx.query.user)) : undefined;
      return { preAuthKeys: (await deps.state.listPreAuthKeys({ userId: u?.id })).map((k) => preAuthKeyView(k, deps.state)) };
    },
  },
  {
    method: 'POST', path: '/api/v1/preauthkey', summary: 'Create a pre-auth key (shown once)', body: { user: 'user name or id', reusable: 'boolean', ephemeral: 'boolean', expiration: 'RFC 3339 time', aclTags: 'string[]' }, response: '{preAuthKey: PreAuthKey}',
    handler: async (ctx, deps) => {
      const b = await readJson(ctx);
      const ref = str(b, 'user');
      const tags = strList(b, 'aclTags') ?? [];
      const user = ref ? userRef(deps, ref) : null;
      if (tags.length) await deps.policy.checkTagsAllowed(tags);
      const { key, secret } = await deps.state.createPreAuthKey({
        userId: user ? user.id : null, reusable: bool(b, 'reusable'), ephemeral: bool(b, 'ephemeral'),
        expiration: expiration(b), tags,
      });
      return { preAuthKey: preAuthKeyView(key, deps.state, secret) };
    },
  },
  {
    method: 'POST', path: '/api/v1/preauthkey/expire', summary: 'Expire a pre-auth key', body: { id: 'key id' }, response: '{preAuthKey: PreAuthKey}',
    handler: async (ctx, deps) => {
      const b = await readJson(ctx);
      const id = str(b, 'id', true)!;
      if (!/^\d+$/.test(id)) throw badField('id', `expected a numeric id, found ${JSON.stringify(id)}`);
      return { preAuthKey: preAuthKeyView(await deps.state.expirePreAuthKey(Number(id)), deps.state) };
    },
  },
  {
    method: 'DELETE', path: '/api/v1/preauthkey', summary: 'Delete a pre-auth key', query: { id: 'key id' }, response: '{}',
    handler: async (ctx, { state }) => {
      const id = String(ctx.query.id ?? '');
      if (!/^\d+$/.test(id)) throw badField('id', `expected a numeric id, found ${JSON.stringify(id)}`);
      await state.deletePreAuthKey(Number(id));
      return {};
    },
  },
  // ---- API keys ----
  {
    method: 'GET', path: '/api/v1/apikey', summary: 'List API keys (never the secret)', response: '{apiKeys: ApiKey[]}',
    handler: async (_ctx, { state }) => ({ apiKeys: (await state.listApiKeys()).map(apiKeyView) }),
  },
  {
    method: 'POST', path: '/api/v1/apikey', summary: 'Create an API key (shown once)', body: { expiration: 'RFC 3339 time' }, response: '{apiKey: string}',
    handler: async (ctx, { state }) => {
      const b = await readJson(ctx);
      const { secret } = await state.createApiKey(expiration(b));
      return { apiKey: secret };
    },
  },
  {
    method: 'POST', path: '/api/v1/apikey/expire', summary: 'Expire an API key', body: { prefix: 'key prefix', id: 'key id' }, response: '{}',
    handler: async (ctx, { state }) => {
      const b = await readJson(ctx);
      await state.expireApiKey(apiKeyRef(b));
      return {};
    },
  },
  {
    method: 'DELETE', path: '/api/v1/apikey/:prefix', summary: 'Delete an API key', response: '{}',
    handler: async (ctx, { state }) => {
      await state.deleteApiKey({ prefix: String(ctx.params.prefix) });
      return {};
    },
  },
  // ---- policy ----
  {
    method: 'GET', path: '/api/v1/policy', summary: 'The policy text in effect', response: '{policy: string, updatedAt: string|null, mode: string}',
    handler: async (_ctx, { policy }) => policy.current(),
  },
  {
    method: 'PUT', path: '/api/v1/policy', summary: 'Replace the policy (database mode)', body: { policy: 'HuJSON text (required)' }, response: '{policy: string, updatedAt: string, warnings: string[]}',
    handler: async (ctx, { policy }) => {
      const b = await readJson(ctx, 4 * 1024 * 1024);
      return policy.set(str(b, 'policy', true)!);
    },
  },
  {
    method: 'POST', path: '/api/v1/policy/check', summary: 'Check a policy against live users and nodes', body: { policy: 'HuJSON text (required)' }, response: '{valid: true, warnings: string[]}',
    handler: async (ctx, { policy }) => {
      const b = await readJson(ctx, 4 * 1024 * 1024);
      return { valid: true, warnings: await policy.check(str(b, 'policy', true)!) };
    },
  },
  // ---- health ----
  {
    method: 'GET', path: '/api/v1/health', summary: 'Database connectivity', response: '{databaseConnectivity: boolean}',
    handler: async (ctx, { health }) => {
      const ok = await health();
      if (!ok) ctx.status = 503;
      return { databaseConnectivity: ok };
    },
  },
];

function view(deps: ApiDeps, n: import('../domain.js').Node) {
  return nodeView(n, deps.state, deps.primaryRoutes && ((x) => deps.primaryRoutes!(x.id)));
}

function apiKeyRef(b: Record<string, unknown>): { prefix?: string; id?: number } {
  const prefix = str(b, 'prefix');
  const id = str(b, 'id');
  if (id !== undefined) {
    if (!/^\d+$/.test(id)) throw badField('id', `expected a numeric id, found ${JSON.stringify(id)}`);
    return { id: Number(id) };
  }
  if (!prefix) throw badField('prefix', 'is required (or id)');
  return { prefix };
}
