import type { Context } from 'koa';
import { z } from 'zod';
import type { ApiKey, OAuthClient, PreAuthKey } from '@headway/core';
import { badField, HeadwayError, notFound } from '@headway/core';
import { optional } from '../schemas.js';
import { route, type ApiDeps, type Route } from '../route.js';
import * as ops from '../operations.js';
import { createOAuthClient, updateOAuthClient } from '../oauth-clients.js';
import { checkAssignableTags, principalOf, requireScope, type Principal } from './auth.js';
import { allows, type Scope } from './scopes.js';
import { checkTailnet, Tailnet } from './tailnet.js';

/*
 * /api/v2's keys: auth keys (Headway's pre-auth keys), API keys and OAuth clients, as Tailscale's
 * API and its Go client's keys.go send and read them. A key's id is the readable part of its
 * secret (`hwkey-auth-<id>-…`), as Tailscale's `tskey-auth-<id>-…`. Creating and deleting go
 * through the same operations as /api/v1; the secret is in the create answer only.
 */

/** AUTH_KEY_DEFAULT_EXPIRY_S is an auth key's life when the request sets none: 90 days, Tailscale's default. */
const AUTH_KEY_DEFAULT_EXPIRY_S = 90 * 86_400;

const Capabilities = z.object({
  devices: z.object({
    create: z.object({
      reusable: z.boolean(),
      ephemeral: z.boolean(),
      preauthorized: z.boolean().meta({ description: 'Always true: Headway has no device approval, every device it registers is authorized' }),
      tags: z.array(z.string()),
    }),
  }),
});

const V2Key = z.object({
  id: z.string().meta({ description: 'Key id: the public part of its secret (auth and API keys) or the client id', examples: ['k3x9q2w7e1r5'] }),
  keyType: z.enum(['auth', 'api', 'client']),
  key: z.string().optional().meta({ description: 'The secret, in the create answer only' }),
  description: z.string(),
  created: z.string().meta({ description: 'RFC 3339 time' }),
  updated: z.string().meta({ description: 'RFC 3339 time' }),
  expires: z.string().optional().meta({ description: 'RFC 3339 time; absent when it never expires' }),
  expirySeconds: z.number().int().optional().meta({ description: 'Seconds from creation to expiry; absent when it never expires' }),
  invalid: z.boolean().meta({ description: 'Expired, or a single-use auth key already used' }),
  capabilities: Capabilities.optional().meta({ description: 'Auth keys: what a device registering with it gets' }),
  scopes: z.array(z.string()).optional().meta({ description: "OAuth clients: their tokens' scopes" }),
  tags: z.array(z.string()).optional().meta({ description: 'OAuth clients: the tags they may assign' }),
  userId: z.string().meta({ description: "Owner's user id; empty for tagged keys, API keys and OAuth clients" }),
}).meta({ id: 'V2Key', description: 'An auth key, API key or OAuth client, as Tailscale\'s API shows keys' });
type V2KeyView = z.input<typeof V2Key>;

const iso = (d: Date) => d.toISOString();
const lifetime = (created: Date, expires: Date | null) => (expires ? { expires: iso(expires), expirySeconds: Math.round((expires.getTime() - created.getTime()) / 1000) } : {});

function authKeyView(k: PreAuthKey, secret?: string): V2KeyView {
  const expired = k.expiration !== null && k.expiration.getTime() <= Date.now();
  return {
    id: k.prefix, keyType: 'auth', ...(secret ? { key: secret } : {}), description: k.description, created: iso(k.createdAt), updated: iso(k.createdAt),
    ...lifetime(k.createdAt, k.expiration), invalid: expired || (!k.reusable && k.used),
    capabilities: { devices: { create: { reusable: k.reusable, ephemeral: k.ephemeral, preauthorized: true, tags: k.tags } } },
    userId: k.userId === null ? '' : String(k.userId),
  };
}

function apiKeyView(k: ApiKey): V2KeyView {
  const expired = k.expiration !== null && k.expiration.getTime() <= Date.now();
  return { id: k.prefix, keyType: 'api', description: '', created: iso(k.createdAt), updated: iso(k.createdAt), ...lifetime(k.createdAt, k.expiration), invalid: expired, userId: '' };
}

function clientView(c: OAuthClient, secret?: string): V2KeyView {
  return {
    id: c.clientId, keyType: 'client', ...(secret ? { key: secret } : {}), description: c.description, created: iso(c.createdAt), updated: iso(c.createdAt),
    invalid: false, scopes: c.scopes, tags: c.tags, userId: '',
  };
}

/** sees says whether the caller may see keys of a kind: an OAuth token needs that kind's scope (read), other callers see all. */
const sees = (p: Principal, resource: Scope['resource']) => p.kind !== 'oauth' || allows(p.scopes, { resource, write: false });

type Found = { kind: 'auth'; key: PreAuthKey } | { kind: 'api'; key: ApiKey } | { kind: 'client'; key: OAuthClient };

/** findKey looks a key id up among auth keys, API keys and OAuth clients; 404 when none has it. */
async function findKey(deps: ApiDeps, id: string): Promise<Found> {
  const auth = (await deps.state.keys.listPreAuthKeys()).find((k) => k.prefix === id);
  if (auth) return { kind: 'auth', key: auth };
  const api = (await deps.state.keys.listApiKeys()).find((k) => k.prefix === id);
  if (api) return { kind: 'api', key: api };
  const client = (await deps.state.oauth.list()).find((c) => c.clientId === id);
  if (client) return { kind: 'client', key: client };
  throw notFound('key', id);
}

/**
 * keyAt finds the key a keys/{id} path names, in a tailnet the caller may use, and checks the
 * scope acting on its kind takes beyond the route's auth_keys (api_access_tokens, oauth_keys).
 */
async function keyAt(deps: ApiDeps, ctx: Context, params: { tailnet: string; id: string }, write: boolean): Promise<Found> {
  checkTailnet(deps, params.tailnet);
  const found = await findKey(deps, params.id);
  if (found.kind !== 'auth') requireScope(principalOf(ctx), { resource: found.kind === 'api' ? 'api_access_tokens' : 'oauth_keys', write });
  return found;
}

const CreateKey = z.object({
  keyType: optional(z.enum(['auth', 'client', 'federated'])).meta({ description: '"auth" (default) or "client" (an OAuth client); "federated" is not served' }),
  capabilities: optional(z.object({
    devices: optional(z.object({
      create: optional(z.object({
        reusable: optional(z.boolean()), ephemeral: optional(z.boolean()), preauthorized: optional(z.boolean()), tags: optional(z.array(z.string())),
      })),
    })),
  })),
  expirySeconds: optional(z.number().int().min(0, { error: 'must not be negative' })).meta({ description: 'Auth keys: seconds until it expires (0 or absent: 90 days)' }),
  description: optional(z.string().max(255, { error: 'at most 255 characters' })),
  scopes: optional(z.array(z.string())).meta({ description: 'OAuth clients: scopes' }),
  tags: optional(z.array(z.string())).meta({ description: 'OAuth clients: tags it may assign' }),
});

/** checkOAuthTags holds a key made under an OAuth token to Tailscale's rule: tagged, with tags of the client only. */
function checkOAuthTags(p: Principal, tags: string[]): void {
  if (p.kind !== 'oauth') return;
  if (!tags.length) throw badField('capabilities.devices.create.tags', 'a key created with an OAuth token must have tags (the client may assign ' + (p.tags.join(', ') || 'none') + ')');
  checkAssignableTags(p, tags);
}

export const KEY_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/keys', operationId: 'v2ListKeys', tag: 'v2:Keys', summary: 'List keys',
    description: 'Auth keys, API keys and OAuth clients, never their secrets. An OAuth token sees API keys only with api_access_tokens:read and OAuth clients only with oauth_keys:read. `all` is accepted and changes nothing: every key is the tailnet\'s.',
    params: z.object({ tailnet: Tailnet }),
    query: z.object({ all: optional(z.string()) }),
    response: z.object({ keys: z.array(V2Key) }), responseDescription: 'The keys',
    errors: [403, 404], scope: { resource: 'auth_keys', write: false },
    handle: async ({ params }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      const p = principalOf(ctx);
      const keys = (await deps.state.keys.listPreAuthKeys()).map((k) => authKeyView(k));
      if (sees(p, 'api_access_tokens')) keys.push(...(await deps.state.keys.listApiKeys()).map(apiKeyView));
      if (sees(p, 'oauth_keys')) keys.push(...(await deps.state.oauth.list()).map((c) => clientView(c)));
      return { keys };
    },
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/keys', operationId: 'v2CreateKey', tag: 'v2:Keys', summary: 'Create an auth key or OAuth client',
    description: 'An auth key (`capabilities.devices.create`: reusable, ephemeral, tags; `expirySeconds`, default 90 days) or, with `keyType: "client"`, an OAuth client (`scopes`, `tags`; needs oauth_keys). '
      + 'The answer holds the secret in `key`; it is never shown again. With an OAuth token an auth key must have tags, each one the client may assign (403 naming the others). '
      + 'Headway API keys belong to no user, so an auth key made with one needs tags too.',
    params: z.object({ tailnet: Tailnet }),
    body: CreateKey,
    response: V2Key, responseDescription: 'The new key with its secret',
    errors: [403, 404, 501], scope: { resource: 'auth_keys', write: true },
    handle: async ({ params, body }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      const p = principalOf(ctx);
      if (body.keyType === 'federated') throw new HeadwayError('not_implemented', 'federated identities are not served by Headway; create an OAuth client (keyType "client")');
      if (body.keyType === 'client') {
        requireScope(p, { resource: 'oauth_keys', write: true });
        const { client, secret } = await createOAuthClient(deps, { scopes: body.scopes ?? [], tags: body.tags, description: body.description });
        return clientView(client, secret);
      }
      const want = body.capabilities?.devices?.create;
      const tags = [...new Set(want?.tags ?? [])];
      checkOAuthTags(p, tags);
      if (!tags.length) throw badField('capabilities.devices.create.tags', 'required: an auth key made through /api/v2 belongs to no user, so it must carry tags');
      const seconds = body.expirySeconds || AUTH_KEY_DEFAULT_EXPIRY_S;
      const { key, secret } = await ops.createPreAuthKey(deps, {
        user: null, reusable: want?.reusable, ephemeral: want?.ephemeral, expiration: new Date(Date.now() + seconds * 1000), tags,
        description: body.description?.trim(),
      });
      return authKeyView(key, secret);
    },
  }),
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/keys/:id', operationId: 'v2GetKey', tag: 'v2:Keys', summary: 'Get a key',
    description: 'One auth key, API key or OAuth client by id, without its secret.',
    params: z.object({ tailnet: Tailnet, id: z.string().meta({ description: 'Key id', examples: ['k3x9q2w7e1r5'] }) }),
    response: V2Key, responseDescription: 'The key',
    errors: [403, 404], scope: { resource: 'auth_keys', write: false },
    handle: async ({ params }, deps, ctx) => {
      const found = await keyAt(deps, ctx, params, false);
      return found.kind === 'auth' ? authKeyView(found.key) : found.kind === 'api' ? apiKeyView(found.key) : clientView(found.key);
    },
  }),
  route({
    method: 'PUT', path: '/api/v2/tailnet/:tailnet/keys/:id', operationId: 'v2SetOAuthClient', tag: 'v2:Keys', summary: 'Set an OAuth client',
    description: 'Replaces an OAuth client\'s `scopes`, `tags` and `description` (`keyType: "client"`), checked as at creation; its id and secret stay. '
      + 'Tokens it already holds keep working, narrowed to the new scopes and tags. Auth keys and API keys cannot be changed (400).',
    params: z.object({ tailnet: Tailnet, id: z.string().meta({ description: 'The client id', examples: ['k3x9q2w7e1r5'] }) }),
    body: z.object({
      keyType: optional(z.enum(['client', 'federated'])).meta({ description: '"client" (the default here); "federated" is not served' }),
      scopes: z.array(z.string()).meta({ description: "The client's scopes, all of them", examples: [['auth_keys', 'devices:core']] }),
      tags: optional(z.array(z.string())).meta({ description: 'The tags it may assign, all of them', examples: [['tag:ci']] }),
      description: optional(z.string().max(255, { error: 'at most 255 characters' })),
    }),
    response: V2Key, responseDescription: 'The client as it is now (no secret)',
    errors: [403, 404, 501], scope: { resource: 'auth_keys', write: true },
    handle: async ({ params, body }, deps, ctx) => {
      if (body.keyType === 'federated') throw new HeadwayError('not_implemented', 'federated identities are not served by Headway');
      const found = await keyAt(deps, ctx, params, true);
      if (found.kind !== 'client') throw badField('keyType', `key ${params.id} is ${found.kind === 'auth' ? 'an auth key' : 'an API key'}; only OAuth clients can be changed (create a new key instead)`);
      return clientView(await updateOAuthClient(deps, found.key.clientId, { scopes: body.scopes, tags: body.tags, description: body.description }));
    },
  }),
  route({
    method: 'DELETE', path: '/api/v2/tailnet/:tailnet/keys/:id', operationId: 'v2DeleteKey', tag: 'v2:Keys', summary: 'Delete a key',
    description: 'An auth key stops registering devices (devices it registered stay); an API key or OAuth client (and its tokens) stops working at once.',
    params: z.object({ tailnet: Tailnet, id: z.string().meta({ description: 'Key id', examples: ['k3x9q2w7e1r5'] }) }),
    response: z.object({}), responseDescription: 'Deleted',
    errors: [403, 404], scope: { resource: 'auth_keys', write: true },
    handle: async ({ params }, deps, ctx) => {
      const found = await keyAt(deps, ctx, params, true);
      if (found.kind === 'auth') await deps.state.keys.deletePreAuthKey(found.key.id);
      else if (found.kind === 'api') await deps.state.keys.deleteApiKey({ id: found.key.id });
      else await deps.state.oauth.delete(found.key.clientId);
      return {};
    },
  }),
];
