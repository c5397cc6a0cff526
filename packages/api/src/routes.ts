import type { Context } from 'koa';
import { z } from 'zod';
import { badField, policyVersion, shown } from '@headway/core';
import type { HeadwayConfig } from '@headway/core';
import type { State } from '@headway/core';
import type { PolicyService } from '@headway/core';
import { BODY_LIMIT, POLICY_LIMIT, readJson } from './http.js';
import {
  ApiKeySchema, ClusterInstanceSchema, Empty, expiration, expirationText, idText, NodeAnswer, NodeSchema, numericId, optional, parseInput, PreAuthKeySchema, queryText, Time, UserSchema,
} from './schemas.js';
import { apiKeyView, preAuthKeyView, userView } from './views.js';
import * as lifecycle from './lifecycle.js';
import * as ops from './operations.js';

export * from './route.js';
import { apiNode as view, apiNodesWithKeys, route, type ApiDeps, type Route } from './route.js';
import { DRIVE_ROUTES } from './drive.js';
import { AUDIT_ROUTES } from './audit.js';
import { OAUTH_CLIENT_ROUTES } from './oauth-clients.js';
import { POLICY_TOOL_ROUTES } from './policy-tools.js';
import { SERVER_ROUTES } from './server-info.js';

const userRef = (deps: ApiDeps, ref: string | undefined, field = 'user') => deps.state.users.resolve(ref ?? '', field);


/** requiredList is a list of strings that must be sent; `hint` says what an empty list means. */
const requiredList = (hint: string, description: string, example: string[]) =>
  z.array(z.string(), { error: (iss) => (iss.input === undefined || iss.input === null ? `is required (${hint})` : undefined) })
    .meta({ description, examples: [example] });

const stringList = (description: string, example: string[]) => optional(z.array(z.string())).meta({ description, examples: [example] });

const NodeIdParams = z.object({ id: numericId('Node id') });
const userQuery = (what: string) => z.object({ user: queryText(`Only ${what} of this user (name or id)`, 'alice') });
const PreAuthKeyAnswer = z.object({ preAuthKey: PreAuthKeySchema });
const PolicyText = z.object({ policy: z.string().meta({ description: 'Policy text (HuJSON: JSON with comments and trailing commas)', examples: ['{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}'] }) });

export const ROUTES: Route[] = [
  // ---- users ----
  route({
    method: 'GET', path: '/api/v1/user', operationId: 'listUsers', tag: 'Users', summary: 'List users',
    description: 'Every user, or those matching all the filters given.',
    query: z.object({
      id: z.string().regex(/^\d+$/, { error: (iss) => `expected a numeric id, found ${shown(iss.input)}` }).transform(Number).optional()
        .meta({ description: 'Only the user with this id', examples: ['1'] }),
      name: queryText('Only the user with this name', 'alice'),
      email: queryText('Only users with this e-mail address', 'alice@example.com'),
    }),
    response: z.object({ users: z.array(UserSchema) }), responseDescription: 'The users',
    handle: async ({ query }, { state }) => ({ users: state.users.list(query).map(userView) }),
  }),
  lifecycle.CREATE_USER,
  route({
    method: 'POST', path: '/api/v1/user/:id/rename/:newName', operationId: 'renameUser', tag: 'Users', summary: 'Rename a user',
    description: "Names are unique without regard to case; the user's nodes keep their addresses.",
    params: z.object({ id: numericId('User id'), newName: z.string().meta({ description: 'The new name', examples: ['alicia'] }) }),
    response: z.object({ user: UserSchema }), responseDescription: 'The renamed user',
    errors: [404, 409],
    handle: async ({ params }, { state }) => ({ user: userView(await state.users.rename(params.id, params.newName)) }),
  }),
  route({
    method: 'POST', path: '/api/v1/user/:id/link', operationId: 'linkUser', tag: 'Users', summary: 'Link a user to an identity-provider identity',
    description: "That person's logins through the provider then land on this user. Without issuer, the configured login method (oidc.issuer) names the identity.",
    params: z.object({ id: numericId('User id') }),
    body: z.object({
      subject: z.string().meta({ description: "The provider's subject (sub claim)", examples: ['248289761001'] }),
      issuer: optional(z.string()).meta({ description: 'Issuer URL (default: oidc.issuer)', examples: ['https://idp.example.com'] }),
      provider: optional(z.string()).meta({ description: 'Provider name (default: oidc)', examples: ['oidc'] }),
    }),
    response: z.object({ user: UserSchema }), responseDescription: 'The linked user',
    errors: [404, 409],
    handle: async ({ params, body }, deps) => {
      const subject = body.subject.trim();
      const issuer = body.issuer?.trim();
      if (!subject) throw badField('subject', 'must not be empty');
      let link: { provider: string; providerId: string };
      if (issuer) {
        if (!/^https?:\/\/\S+$/.test(issuer)) throw badField('issuer', `expected an http(s) URL, found ${shown(issuer)}`);
        link = { provider: body.provider ?? 'oidc', providerId: `${issuer.replace(/\/+$/, '')}/${subject.replace(/^\/+/, '')}` };
      } else if (deps.providerIdFor) {
        link = deps.providerIdFor(subject);
      } else {
        throw badField('issuer', 'no identity provider is configured (oidc.issuer); pass the issuer URL');
      }
      return { user: userView(await deps.state.users.link(params.id, link.provider, link.providerId)) };
    },
  }),
  lifecycle.DELETE_USER,
  // ---- nodes ----
  route({
    method: 'GET', path: '/api/v1/node', operationId: 'listNodes', tag: 'Nodes', summary: 'List nodes',
    description: 'Every node, or those of one user.',
    query: userQuery('the nodes'),
    response: z.object({ nodes: z.array(NodeSchema) }), responseDescription: 'The nodes',
    errors: [404],
    handle: async ({ query }, deps) => ({ nodes: await apiNodesWithKeys(deps, ops.listNodes(deps, query.user), true) }),
  }),
  route({
    method: 'GET', path: '/api/v1/node/:id', operationId: 'getNode', tag: 'Nodes', summary: 'Get a node',
    description: 'One node by id.',
    params: NodeIdParams,
    response: NodeAnswer, responseDescription: 'The node',
    errors: [404],
    handle: async ({ params }, deps) => ({ node: (await apiNodesWithKeys(deps, [deps.state.nodes.require(params.id)]))[0]! }),
  }),
  route({
    method: 'DELETE', path: '/api/v1/node/:id', operationId: 'deleteNode', tag: 'Nodes', summary: 'Delete a node',
    description: 'Removes the node; its peers lose it from their maps at once.',
    params: NodeIdParams,
    response: Empty, responseDescription: 'Deleted',
    errors: [404],
    handle: async ({ params }, { state }) => { await state.nodes.delete(params.id); return {}; },
  }),
  route({
    method: 'POST', path: '/api/v1/node/:id/rename/:newName', operationId: 'renameNode', tag: 'Nodes', summary: 'Rename a node',
    description: 'Changes the DNS label (givenName) only; the hostname the device reports stays.',
    params: z.object({ id: numericId('Node id'), newName: z.string().meta({ description: 'The new DNS label', examples: ['laptop'] }) }),
    response: NodeAnswer, responseDescription: 'The renamed node',
    errors: [404, 409],
    handle: async ({ params }, deps) => ({ node: view(deps, await deps.state.nodes.rename(params.id, params.newName)) }),
  }),
  lifecycle.EXPIRE_NODE,
  route({
    method: 'POST', path: '/api/v1/node/:id/tags', operationId: 'setNodeTags', tag: 'Nodes', summary: 'Replace the tags of a node',
    description: "Every tag must be defined in the policy's tagOwners when a policy is in force.",
    params: NodeIdParams,
    body: z.object({ tags: requiredList('an empty list removes all tags', 'The new tags (tag:<name>)', ['tag:web']) }),
    response: NodeAnswer, responseDescription: 'The node with its new tags',
    errors: [404],
    handle: async ({ params, body }, deps) => ({ node: view(deps, await ops.setNodeTags(deps, params.id, body.tags)) }),
  }),
  route({
    method: 'POST', path: '/api/v1/node/:id/approve_routes', operationId: 'approveNodeRoutes', tag: 'Nodes', summary: 'Replace the approved routes of a node',
    description: 'An exit route (0.0.0.0/0 or ::/0) approves both families.',
    params: NodeIdParams,
    body: z.object({ routes: requiredList('an empty list removes all approvals', 'The approved routes (CIDR prefixes)', ['10.0.0.0/24']) }),
    response: NodeAnswer, responseDescription: 'The node with its approved routes',
    errors: [404],
    handle: async ({ params, body }, deps) => ({ node: view(deps, await ops.approveNodeRoutes(deps, params.id, body.routes)) }),
  }),
  route({
    method: 'POST', path: '/api/v1/node/register', operationId: 'registerNode', tag: 'Nodes', summary: 'Approve an interactive registration',
    description: 'Registers the device waiting at the AuthURL that `tailscale up` printed, for a user.',
    query: z.object({
      user: z.string().meta({ description: 'User name or id', examples: ['alice'] }),
      key: z.string().meta({ description: 'Registration key: the last part of the AuthURL', examples: ['hwreg-0123456789abcdef'] }),
    }),
    response: NodeAnswer, responseDescription: 'The registered node',
    errors: [404, 409, 503],
    handle: async ({ query }, deps) => ({ node: view(deps, await ops.registerPendingNode(deps, { user: query.user, authId: query.key, authIdField: 'key' })) }),
  }),
  route({
    method: 'POST', path: '/api/v1/node/backfillips', operationId: 'backfillNodeIps', tag: 'Nodes', summary: 'Give every node an address of each enabled family',
    description: 'After enabling an address family (prefixes.v4 or prefixes.v6), gives existing nodes an address of it.',
    response: z.object({ changes: z.array(z.string()).meta({ description: 'One line per node that got an address', examples: [['node laptop: 100.64.0.1, fd7a:115c:a1e0::1']] }) }),
    responseDescription: 'What changed',
    errors: [409],
    handle: async (_input, deps) => ({ changes: await ops.backfillNodeIps(deps) }),
  }),
  route({
    method: 'POST', path: '/api/v1/debug/node', operationId: 'createDebugNode', tag: 'Debug', summary: 'Create a node record without a device',
    description: 'For tests and demos: the node has fresh random keys and never connects.',
    body: z.object({
      user: idText().meta({ description: 'Owner: user name or id', examples: ['alice'] }),
      name: z.string().min(1, { error: 'must not be empty' }).refine((s) => s.trim() !== '', { error: 'must not be empty' }).meta({ description: 'Hostname', examples: ['demo-laptop'] }),
      key: optional(z.string().regex(/^mkey:[0-9a-f]{64}$/, { error: (iss) => `expected mkey:<64 hex digits>, found ${shown(iss.input)}` }))
        .meta({ description: 'Machine key (random when absent)', examples: [`mkey:${'a1'.repeat(32)}`] }),
      routes: stringList('Routes the node advertises (CIDR prefixes)', ['10.0.0.0/24']),
    }),
    response: NodeAnswer, responseDescription: 'The new node',
    errors: [404, 409],
    handle: async ({ body }, deps) => ({
      node: view(deps, await ops.createDebugNode(deps, { user: body.user, name: body.name, machineKey: body.key, routes: body.routes ?? [] })),
    }),
  }),
  ...lifecycle.AUTH_ROUTES,
  // ---- pre-auth keys ----
  route({
    method: 'GET', path: '/api/v1/preauthkey', operationId: 'listPreAuthKeys', tag: 'Pre-auth keys', summary: 'List pre-auth keys',
    description: 'Keys are redacted: the secret is shown only once, when the key is created.',
    query: userQuery('the keys'),
    response: z.object({ preAuthKeys: z.array(PreAuthKeySchema) }), responseDescription: 'The keys (redacted)',
    errors: [404],
    handle: async ({ query }, deps) => {
      const u = query.user ? userRef(deps, query.user) : undefined;
      return { preAuthKeys: (await deps.state.keys.listPreAuthKeys({ userId: u?.id })).map((k) => preAuthKeyView(k, deps.state)) };
    },
  }),
  route({
    method: 'POST', path: '/api/v1/preauthkey', operationId: 'createPreAuthKey', tag: 'Pre-auth keys', summary: 'Create a pre-auth key',
    description: 'The answer holds the whole key; it is never shown again. A key without a user must have tags.',
    body: z.object({
      user: optional(idText()).meta({ description: 'Owner: user name or id; absent for a tags-only key', examples: ['alice'] }),
      reusable: optional(z.boolean()).meta({ description: 'Register more than one node (default false)' }),
      ephemeral: optional(z.boolean()).meta({ description: 'Nodes it registers are ephemeral (default false)' }),
      expiration: expirationText,
      aclTags: stringList('Tags given to the nodes it registers', ['tag:web']),
    }),
    response: PreAuthKeyAnswer, responseDescription: 'The new key, in full',
    errors: [404],
    handle: async ({ body }, deps) => {
      const user = body.user ? userRef(deps, body.user) : null;
      const { key, secret } = await ops.createPreAuthKey(deps, {
        user, reusable: body.reusable, ephemeral: body.ephemeral, expiration: expiration(body.expiration), tags: body.aclTags ?? [],
      });
      return { preAuthKey: preAuthKeyView(key, deps.state, secret) };
    },
  }),
  route({
    method: 'POST', path: '/api/v1/preauthkey/expire', operationId: 'expirePreAuthKey', tag: 'Pre-auth keys', summary: 'Expire a pre-auth key',
    description: 'The key stops registering nodes now; nodes it registered stay.',
    body: z.object({ id: idText().pipe(numericId()).meta({ description: 'Key id', examples: ['1'] }) }),
    response: PreAuthKeyAnswer, responseDescription: 'The expired key (redacted)',
    errors: [404],
    handle: async ({ body }, deps) => ({ preAuthKey: preAuthKeyView(await deps.state.keys.expirePreAuthKey(body.id), deps.state) }),
  }),
  route({
    method: 'DELETE', path: '/api/v1/preauthkey', operationId: 'deletePreAuthKey', tag: 'Pre-auth keys', summary: 'Delete a pre-auth key',
    description: 'Nodes it registered stay.',
    query: z.object({ id: numericId('Key id') }),
    response: Empty, responseDescription: 'Deleted',
    errors: [404],
    handle: async ({ query }, { state }) => { await state.keys.deletePreAuthKey(query.id); return {}; },
  }),
  // ---- API keys ----
  route({
    method: 'GET', path: '/api/v1/apikey', operationId: 'listApiKeys', tag: 'API keys', summary: 'List API keys',
    description: 'Never the secrets: they are shown only once, when a key is created.',
    response: z.object({ apiKeys: z.array(ApiKeySchema) }), responseDescription: 'The keys',
    handle: async (_input, { state }) => ({ apiKeys: (await state.keys.listApiKeys()).map(apiKeyView) }),
  }),
  route({
    method: 'POST', path: '/api/v1/apikey', operationId: 'createApiKey', tag: 'API keys', summary: 'Create an API key',
    description: 'The answer holds the whole key; it is never shown again.',
    body: z.object({ expiration: expirationText }),
    response: z.object({ apiKey: z.string().meta({ description: 'The key, in full (Authorization: Bearer <key>)', examples: ['hwkey-api-0123456789ab-…'] }) }),
    responseDescription: 'The new key',
    handle: async ({ body }, { state }) => {
      const { secret } = await state.keys.createApiKey(expiration(body.expiration));
      return { apiKey: secret };
    },
  }),
  route({
    method: 'POST', path: '/api/v1/apikey/expire', operationId: 'expireApiKey', tag: 'API keys', summary: 'Expire an API key',
    description: 'Names the key by `id` or by `prefix` (one of them is required; `id` wins when both are sent).',
    body: z.object({
      prefix: optional(z.string()).meta({ description: 'Key prefix', examples: ['0123456789ab'] }),
      id: optional(idText().pipe(numericId())).meta({ description: 'Key id', examples: ['1'] }),
    }),
    response: Empty, responseDescription: 'Expired',
    errors: [404],
    handle: async ({ body }, { state }) => { await state.keys.expireApiKey(ops.apiKeyRef(body)); return {}; },
  }),
  route({
    method: 'DELETE', path: '/api/v1/apikey/:prefix', operationId: 'deleteApiKey', tag: 'API keys', summary: 'Delete an API key',
    description: 'The key stops working at once.',
    params: z.object({ prefix: z.string().meta({ description: 'Key prefix', examples: ['0123456789ab'] }) }),
    response: Empty, responseDescription: 'Deleted',
    errors: [404],
    handle: async ({ params }, { state }) => { await state.keys.deleteApiKey({ prefix: params.prefix }); return {}; },
  }),
  // ---- policy ----
  route({
    method: 'GET', path: '/api/v1/policy', operationId: 'getPolicy', tag: 'Policy', summary: 'The policy in force',
    description: 'The policy text in force, when it was loaded and where it comes from.',
    response: z.object({
      policy: z.string().meta({ description: 'Policy text; empty when none is set' }),
      updatedAt: Time.nullable().meta({ description: 'When it was last loaded or set; null when none is' }),
      mode: z.string().meta({ description: 'Where the policy comes from (policy.mode)', examples: ['database'] }),
      source: z.string().meta({ description: 'Where the policy is stored: the file\'s path (policy.mode: file) or the database', examples: ['database'] }),
      version: z.string().meta({ description: 'This version of the text (SHA-256, hex; the /api/v2 ETag): send it back with PUT to set only if nobody changed it since' }),
    }),
    responseDescription: 'The policy',
    handle: async (_input, { policy }) => ({ ...policy.current(), source: policy.origin, version: policy.version }),
  }),
  route({
    method: 'PUT', path: '/api/v1/policy', operationId: 'setPolicy', tag: 'Policy', summary: 'Replace the policy',
    description: 'Only with policy.mode: database (400 policy_read_only otherwise). An invalid policy is refused with every error listed in `errors`. '
      + 'With `version` (from GET) the policy is set only if the stored policy is still that version, checked in the write\'s transaction (412 otherwise).',
    body: PolicyText.extend({
      version: optional(z.string().regex(/^[0-9a-f]{64}$/, { error: (iss) => `expected the 64 hex digits GET answers, found ${shown(iss.input)}` }))
        .meta({ description: 'The version the change was made to (GET\'s `version`); absent: set whatever is stored' }),
    }),
    bodyLimit: POLICY_LIMIT, errors: [412],
    response: z.object({
      policy: z.string(), updatedAt: Time, warnings: z.array(z.string()).meta({ description: 'Things that work but are likely mistakes' }),
      version: z.string().meta({ description: 'The version of the text now in force (for the next PUT)' }),
    }),
    responseDescription: 'The policy now in force',
    handle: async ({ body }, { policy }) => ({ ...await policy.set(body.policy, { ifVersion: body.version }), version: policyVersion(body.policy) }),
  }),
  route({
    method: 'POST', path: '/api/v1/policy/check', operationId: 'checkPolicy', tag: 'Policy', summary: 'Check a policy',
    description: 'Checks the text against live users and nodes without applying it. An invalid policy is a 400 listing every error.',
    body: PolicyText, bodyLimit: POLICY_LIMIT, readOnly: true,
    response: z.object({ valid: z.literal(true), warnings: z.array(z.string()).meta({ description: 'Things that work but are likely mistakes' }) }),
    responseDescription: 'The policy is valid',
    handle: async ({ body }, { policy }) => ({ valid: true as const, warnings: await policy.check(body.policy) }),
  }),
  ...POLICY_TOOL_ROUTES,
  // ---- health ----
  route({
    method: 'GET', path: '/api/v1/health', operationId: 'health', tag: 'Health', summary: 'Database connectivity',
    description: 'Whether the database answers. The unauthenticated /health endpoint reports the same for load balancers.',
    response: z.object({ databaseConnectivity: z.boolean() }),
    responseDescription: 'The database answers',
    also: { status: 503, description: 'The database does not answer (databaseConnectivity: false)' },
    handle: async (_input, { health }, ctx) => {
      const ok = await health();
      if (!ok) ctx.status = 503;
      return { databaseConnectivity: ok };
    },
  }),
  // ---- cluster ----
  route({
    method: 'GET', path: '/api/v1/cluster', operationId: 'clusterStatus', tag: 'Cluster', summary: 'Instances sharing the database',
    description: 'Every instance recorded in the database with its address, map sessions and last heartbeat. A single instance (cluster.enabled: false) answers `enabled: false` and no instances.',
    response: z.object({
      enabled: z.boolean().meta({ description: 'cluster.enabled on the answering instance' }),
      instances: z.array(ClusterInstanceSchema),
    }),
    responseDescription: 'The instances',
    handle: async (_input, { cluster }) => ({ enabled: Boolean(cluster), instances: cluster ? await cluster() : [] }),
  }),
  ...DRIVE_ROUTES,
  ...AUDIT_ROUTES,
  ...OAUTH_CLIENT_ROUTES,
  ...SERVER_ROUTES,
];
