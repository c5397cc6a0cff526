import type { Context } from 'koa';
import { z } from 'zod';
import { OAuthTokenError } from '@headway/core';
import { readBody } from '../http.js';
import { route, type Route } from '../route.js';

/*
 * The OAuth token endpoint of /api/v2: the client-credentials grant (RFC 6749 section 4.4) as
 * golang.org/x/oauth2's clientcredentials sends it, which Tailscale's Go client, Terraform
 * provider and Kubernetes operator use. The client authenticates with basic auth (x/oauth2's
 * first try) or with client_id and client_secret in the form (its second); errors are RFC 6749's
 * `{error, error_description}`.
 */

/** V2_TOKEN_PATH is where /api/v2's OAuth clients exchange their credentials for an access token. */
export const V2_TOKEN_PATH = '/api/v2/oauth/token';

/** TOKEN_BODY_LIMIT caps the form: three short fields fit many times over. */
const TOKEN_BODY_LIMIT = 16 * 1024;

/** basicCredentials reads `Authorization: Basic` as RFC 6749 section 2.3.1 writes it: id and secret each form-encoded. */
function basicCredentials(header: string): { id: string; secret: string } | null {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header);
  if (!m) return null;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return null;
  const unescape = (s: string) => {
    try { return decodeURIComponent(s.replace(/\+/g, ' ')); } catch { return s; }
  };
  return { id: unescape(decoded.slice(0, colon)), secret: unescape(decoded.slice(colon + 1)) };
}

/** tokenRequest reads the grant: form fields, the client from basic auth or else from the form. */
async function tokenRequest(ctx: Context) {
  const type = ctx.get('content-type').split(';')[0]!.trim().toLowerCase();
  const raw = await readBody(ctx, TOKEN_BODY_LIMIT);
  if (type && type !== 'application/x-www-form-urlencoded') {
    throw new OAuthTokenError('invalid_request', `the token request must be application/x-www-form-urlencoded, found ${type.slice(0, 60)}`);
  }
  const form = new URLSearchParams(raw.toString('utf8'));
  const grantType = form.get('grant_type');
  if (!grantType) throw new OAuthTokenError('invalid_request', 'grant_type is required (client_credentials)');
  if (grantType !== 'client_credentials') throw new OAuthTokenError('unsupported_grant_type', `grant_type ${JSON.stringify(grantType.slice(0, 60))} is not supported; use client_credentials`);
  const basic = basicCredentials(ctx.get('authorization'));
  const id = basic?.id ?? form.get('client_id') ?? undefined;
  const secret = basic?.secret ?? form.get('client_secret');
  if (!secret) throw new OAuthTokenError('invalid_client', 'client credentials are required: basic auth, or client_id and client_secret in the form');
  return { id: id || undefined, secret, scope: form.get('scope') ?? undefined };
}

const TokenAnswer = z.object({
  access_token: z.string().meta({ description: 'The access token (Authorization: Bearer <token>); shown once', examples: ['hwkey-token-0123456789ab-…'] }),
  token_type: z.literal('Bearer'),
  expires_in: z.number().int().meta({ description: 'Seconds the token is valid for', examples: [3600] }),
  scope: z.string().meta({ description: "The token's scopes, space-separated", examples: ['auth_keys devices:core'] }),
}).meta({ id: 'V2AccessToken', description: 'An access token (RFC 6749 section 5.1)' });

export const OAUTH_ROUTES: Route[] = [
  route({
    method: 'POST', path: V2_TOKEN_PATH, operationId: 'v2OAuthToken', tag: 'v2:OAuth', summary: 'Get an access token (client credentials)',
    description: 'Form-encoded body: `grant_type=client_credentials`, optional `scope` (space-separated; default: all of the client\'s), '
      + 'the client in basic auth or as `client_id` and `client_secret`. The token is valid for an hour on every instance sharing the database. '
      + 'Refusals are RFC 6749 errors: 401 `invalid_client` (wrong id or secret), 400 `invalid_scope` (a scope the client lacks), '
      + '`invalid_request`, `unsupported_grant_type`.',
    response: TokenAnswer, responseDescription: 'The access token',
    errors: [400], scope: 'public',
    handle: async (_input, deps, ctx) => {
      ctx.set('Cache-Control', 'no-store');
      try {
        const req = await tokenRequest(ctx);
        const issued = await deps.state.oauth.issueToken(req.id, req.secret, req.scope);
        return { access_token: issued.accessToken, token_type: 'Bearer' as const, expires_in: issued.expiresIn, scope: issued.scopes.join(' ') };
      } catch (err) {
        if (!(err instanceof OAuthTokenError)) throw err;
        ctx.status = err.status;
        if (err.status === 401) ctx.set('WWW-Authenticate', 'Basic realm="headway"');
        ctx.body = { error: err.code, error_description: err.message };
        return ctx.body as never;
      }
    },
  }),
];
