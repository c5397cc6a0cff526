import { z } from 'zod';
import type { OAuthClient, OAuthClientInput } from '@headway/core';
import { route, type ApiDeps, type Route } from './route.js';
import { Empty, optional, Time } from './schemas.js';

/*
 * OAuth clients of /api/v2 (Tailscale's client-credentials grant) as /api/v1 manages them:
 * list, create (the secret shown once), delete (its tokens stop at once). /api/v2's keys
 * endpoint creates and deletes them through the same operations.
 */

export const OAuthClientSchema = z.object({
  id: z.string().meta({ description: 'The client id (the public part of its secret)', examples: ['k3x9q2w7e1r5'] }),
  description: z.string(),
  scopes: z.array(z.string()).meta({ description: "Scopes its tokens may have (Tailscale's names)", examples: [['auth_keys', 'devices:core']] }),
  tags: z.array(z.string()).meta({ description: 'Tags the keys it creates may carry', examples: [['tag:ci']] }),
  createdAt: Time,
  lastUsed: Time.nullable().meta({ description: 'When it was last issued a token; null if never' }),
}).meta({ id: 'OAuthClient', description: 'An OAuth client of /api/v2 (never its secret)' });

export function oauthClientView(c: OAuthClient): z.input<typeof OAuthClientSchema> {
  return {
    id: c.clientId, description: c.description, scopes: c.scopes, tags: c.tags,
    createdAt: c.createdAt.toISOString(), lastUsed: c.lastUsed ? c.lastUsed.toISOString() : null,
  };
}

/** createOAuthClient issues a client; its tags must be defined in the policy's tagOwners when a policy is in force. */
export async function createOAuthClient(deps: ApiDeps, input: OAuthClientInput): Promise<{ client: OAuthClient; secret: string }> {
  if (input.tags?.length) await deps.policy.checkTagsAllowed(input.tags);
  return deps.state.oauth.create(input);
}

/** updateOAuthClient replaces a client's description, scopes and tags, its tags checked as at creation. */
export async function updateOAuthClient(deps: ApiDeps, clientId: string, input: OAuthClientInput): Promise<OAuthClient> {
  if (input.tags?.length) await deps.policy.checkTagsAllowed(input.tags);
  return deps.state.oauth.update(clientId, input);
}

export const OAUTH_CLIENT_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v1/oauthclient', operationId: 'listOAuthClients', tag: 'OAuth clients', summary: 'List OAuth clients',
    description: 'Never the secrets: they are shown only once, when a client is created.',
    response: z.object({ oauthClients: z.array(OAuthClientSchema) }), responseDescription: 'The clients',
    handle: async (_input, { state }) => ({ oauthClients: (await state.oauth.list()).map(oauthClientView) }),
  }),
  route({
    method: 'POST', path: '/api/v1/oauthclient', operationId: 'createOAuthClient', tag: 'OAuth clients', summary: 'Create an OAuth client',
    description: 'The answer holds the secret; it is never shown again. Scopes `auth_keys` and `devices:core` need at least one tag.',
    body: z.object({
      scopes: z.array(z.string()).meta({ description: "Scopes (Tailscale's names; legacy names are read as their successors)", examples: [['auth_keys', 'devices:core:read']] }),
      tags: optional(z.array(z.string())).meta({ description: 'Tags the keys it creates may carry (each defined in tagOwners when a policy is in force)', examples: [['tag:ci']] }),
      description: optional(z.string()).meta({ description: 'What the client is for', examples: ['terraform'] }),
    }),
    response: z.object({
      oauthClient: OAuthClientSchema,
      secret: z.string().meta({ description: 'The client secret, in full (client_secret of the token request)', examples: ['hwkey-client-k3x9q2w7e1r5-…'] }),
    }),
    responseDescription: 'The new client with its secret',
    handle: async ({ body }, deps) => {
      const { client, secret } = await createOAuthClient(deps, { scopes: body.scopes, tags: body.tags, description: body.description });
      return { oauthClient: oauthClientView(client), secret };
    },
  }),
  route({
    method: 'DELETE', path: '/api/v1/oauthclient/:id', operationId: 'deleteOAuthClient', tag: 'OAuth clients', summary: 'Delete an OAuth client',
    description: 'The client and every access token it was issued stop working at once.',
    params: z.object({ id: z.string().meta({ description: 'Client id', examples: ['k3x9q2w7e1r5'] }) }),
    response: Empty, responseDescription: 'Deleted',
    errors: [404],
    handle: async ({ params }, { state }) => { await state.oauth.delete(params.id); return {}; },
  }),
];
