import type { OAuthClient } from '../domain.js';
import { badField, HeadwayError, notFound } from '../errors.js';
import type { OAuthClientRepository } from '../ports/storage.js';
import { issueSecret, parseSecret, secretMatches } from '../secrets.js';
import { checkTag } from '../state/names.js';
import { covers, narrowScopes, parseScopes, TAGGING_SCOPES } from './scopes.js';

/** OAUTH_TOKEN_TTL_S is an access token's life in seconds: an hour, as Tailscale's; clients fetch a new one when it ends. */
export const OAUTH_TOKEN_TTL_S = 3600;
/** OAUTH_DESCRIPTION_MAX caps a client's description (the column is 255 characters). */
const OAUTH_DESCRIPTION_MAX = 255;

/** OAuthTokenErrorCode is an RFC 6749 (section 5.2) token endpoint error. */
export type OAuthTokenErrorCode = 'invalid_request' | 'invalid_client' | 'invalid_scope' | 'unsupported_grant_type';

/** OAuthTokenError is a refused token request, answered as RFC 6749 says: `{error, error_description}` with `status`. */
export class OAuthTokenError extends Error {
  readonly status: number;
  constructor(readonly code: OAuthTokenErrorCode, message: string) {
    super(message);
    this.name = 'OAuthTokenError';
    this.status = code === 'invalid_client' ? 401 : 400;
  }
}

/** IssuedToken is a token endpoint answer's content: the token (shown once), its life and its scopes. */
export interface IssuedToken { accessToken: string; expiresIn: number; scopes: string[] }

/** OAuthClientInput is what a new client is made of; scopes are names as Tailscale spells them (legacy names accepted). */
export interface OAuthClientInput { description?: string; scopes: string[]; tags?: string[] }

/**
 * OAuthClientStore keeps the OAuth clients of /api/v2 and issues and checks their access
 * tokens (client-credentials grant). Nothing is cached: every check reads the database, so a
 * token issued on one instance works on every instance sharing it, and deleting a client
 * (which deletes its tokens in the same transaction) stops its tokens everywhere at once.
 * Secrets and tokens are kept only as SHA-256 hashes; each is shown once, when issued.
 */
/**
 * checkClientInput checks what a client is made or updated with: known scopes (at least one), `tag:` names, tags
 * when a scope creates tagged keys or tags devices, a description within its limit. The caller checks the tags
 * against the policy.
 */
function checkClientInput(input: OAuthClientInput): { description: string; scopes: string[]; tags: string[] } {
  const { scopes, unknown } = parseScopes(input.scopes);
  if (unknown.length) throw badField('scopes', `unknown scope ${unknown.map((s) => JSON.stringify(s.slice(0, 60))).join(', ')}`);
  if (!scopes.length) throw badField('scopes', 'at least one scope is required (e.g. devices:core, auth_keys, all:read)');
  const tags = [...new Set(input.tags ?? [])].sort();
  for (const t of tags) { const err = checkTag(t); if (err) throw badField('tags', err); }
  const tagging = scopes.filter((s) => TAGGING_SCOPES.includes(s));
  if (tagging.length && !tags.length) {
    throw badField('tags', `scope ${tagging.join(' and ')} needs at least one tag: the keys and devices it tags may carry only the client's tags`);
  }
  const description = (input.description ?? '').trim();
  if (description.length > OAUTH_DESCRIPTION_MAX) throw badField('description', `at most ${OAUTH_DESCRIPTION_MAX} characters, found ${description.length}`);
  return { description, scopes, tags };
}

export class OAuthClientStore {
  /** now is the clock tokens are issued and checked by (tests set it). */
  now: () => Date = () => new Date();

  constructor(private readonly repo: OAuthClientRepository | undefined) {}

  /** available: the storage keeps OAuth clients (every SQL adapter does). */
  get available(): boolean { return this.repo !== undefined; }

  private get clients(): OAuthClientRepository {
    if (!this.repo) throw new HeadwayError('not_implemented', 'this storage adapter keeps no OAuth clients');
    return this.repo;
  }

  /**
   * create checks and stores a client: known scopes (at least one), `tag:` names, tags when a
   * scope creates tagged keys or tags devices. The caller checks the tags against the policy.
   */
  async create(input: OAuthClientInput): Promise<{ client: OAuthClient; secret: string }> {
    const checked = checkClientInput(input);
    const issued = issueSecret('client');
    const client = await this.clients.create({ clientId: issued.prefix, hash: issued.hash, ...checked });
    return { client, secret: issued.full };
  }

  /**
   * update replaces a client's description, scopes and tags, checked as at creation; its id and secret stay.
   * Tokens it holds keep working with their scopes narrowed to the new ones (verifyToken) and the new tags.
   */
  async update(clientId: string, input: OAuthClientInput): Promise<OAuthClient> {
    const checked = checkClientInput(input);
    const client = await this.find(clientId);
    const updated = await this.clients.update(client.id, checked);
    if (!updated) throw notFound('OAuth client', clientId);
    return updated;
  }

  list(): Promise<OAuthClient[]> { return this.repo ? this.repo.list() : Promise.resolve([]); }

  /** find names a client by its public id (404 when there is none). */
  async find(clientId: string): Promise<OAuthClient> {
    const client = this.repo ? await this.repo.getByClientId(clientId) : undefined;
    if (!client) throw notFound('OAuth client', clientId);
    return client;
  }

  /** delete removes a client; its tokens stop working at once, on every instance. */
  async delete(clientId: string): Promise<void> {
    const client = await this.find(clientId);
    await this.clients.delete(client.id);
  }

  /**
   * issueToken runs the client-credentials grant: checks the client's secret (`invalid_client`)
   * and the requested scopes (`invalid_scope` for one the client lacks; none requested: all of
   * the client's), stores a hash of a new token that expires in OAUTH_TOKEN_TTL_S, and sweeps
   * expired ones.
   */
  async issueToken(clientId: string | undefined, secret: string, requestedScopes?: string): Promise<IssuedToken> {
    const parsed = parseSecret('client', secret);
    if (!parsed || (clientId && clientId !== parsed.prefix)) throw new OAuthTokenError('invalid_client', 'client authentication failed');
    const client = this.repo ? await this.repo.getByClientId(parsed.prefix) : undefined;
    if (!client || !secretMatches(parsed.secret, client.hash)) throw new OAuthTokenError('invalid_client', 'client authentication failed');
    let scopes = client.scopes;
    if (requestedScopes !== undefined && requestedScopes.trim()) {
      const asked = parseScopes(requestedScopes);
      if (asked.unknown.length) throw new OAuthTokenError('invalid_scope', `unknown scope ${asked.unknown.map((s) => JSON.stringify(s.slice(0, 60))).join(', ')}`);
      const lacking = asked.scopes.filter((s) => !covers(client.scopes, s));
      if (lacking.length) throw new OAuthTokenError('invalid_scope', `scope ${lacking.join(' ')} is not granted to this client (it has ${client.scopes.join(' ')})`);
      scopes = asked.scopes;
    }
    const now = this.now();
    await this.clients.deleteExpiredTokens(now);
    const issued = issueSecret('token');
    await this.clients.createToken({
      prefix: issued.prefix, hash: issued.hash, client: client.id, scopes, expiresAt: new Date(now.getTime() + OAUTH_TOKEN_TTL_S * 1000),
    });
    await this.clients.setLastUsed(client.id, now);
    return { accessToken: issued.full, expiresIn: OAUTH_TOKEN_TTL_S, scopes };
  }

  /** verifyToken: the grant of a valid, unexpired token of an existing client; null for anything else. */
  async verifyToken(token: string): Promise<{ clientId: string; scopes: string[]; tags: string[] } | null> {
    const parsed = this.repo ? parseSecret('token', token) : undefined;
    if (!parsed) return null;
    const stored = await this.repo!.getToken(parsed.prefix);
    if (!stored || !secretMatches(parsed.secret, stored.hash) || stored.expiresAt.getTime() <= this.now().getTime()) return null;
    const client = await this.repo!.get(stored.client);
    if (!client) return null;
    // A client changed since the token was issued: the token keeps only what the client still has.
    return { clientId: client.clientId, scopes: narrowScopes(stored.scopes, client.scopes), tags: client.tags };
  }
}
