/*
 * The REST API's shapes as the CLI uses them. Nothing here is written by hand: every type
 * comes from api-schema.ts, which openapi-typescript generates from the server's OpenAPI
 * document (itself generated from the zod schemas that validate requests), so a field the
 * server renames or retypes breaks the CLI's build instead of its output.
 */
import type { components, paths } from './api-schema.js';

export type { components, operations, paths } from './api-schema.js';

type Schemas = components['schemas'];

/** ApiUser is a user as the server sends it (ids as strings, times RFC 3339). */
export type ApiUser = Schemas['User'];
/** ApiNode is a node; `name` is the reported hostname, `givenName` the admin-renamable DNS label. */
export type ApiNode = Schemas['Node'];
export type RegisterMethod = ApiNode['registerMethod'];
/** ApiPreAuthKey's `key` is redacted (`hwkey-auth-<prefix>-***`) except in the create answer. */
export type ApiPreAuthKey = Schemas['PreAuthKey'];
export type ApiKeyInfo = Schemas['ApiKey'];
/** ApiProblem is the RFC 9457 problem the server returns for every failure. */
export type ApiProblem = Schemas['Problem'];

/** ApiMethod is an HTTP method the API uses, as the generated `paths` spell it. */
export type ApiMethod = 'get' | 'post' | 'put' | 'delete';

/** Concrete turns a templated path (/api/v1/node/{id}) into the strings it matches (/api/v1/node/${string}). */
type Concrete<S extends string> = S extends `${infer Head}{${string}}${infer Tail}` ? `${Head}${string}${Concrete<Tail>}` : S;

/** ApiPath<M> is every path that has an M operation, with its parameters filled in. */
export type ApiPath<M extends ApiMethod> = {
  [P in keyof paths]: paths[P][M] extends { responses: object } ? Concrete<P & string> : never;
}[keyof paths];

/**
 * ApiAnswer<M> is the 200 body of any M operation. Bodies without fields (the empty
 * answer of a delete) are left out: `Record<string, never>` would fit every expectation.
 */
export type ApiAnswer<M extends ApiMethod> = {
  [P in keyof paths]: paths[P][M] extends { responses: { 200: { content: { 'application/json': infer R } } } }
    ? (string extends keyof R ? never : R)
    : never;
}[keyof paths];

/**
 * AnswerCheck is an extra, empty parameter list when some M operation answers a body
 * that fits what the caller expects (T), and an impossible one otherwise, so that
 * `client.get<{ nodes: ApiNode[] }>(...)` compiles only while an operation sends that.
 * A caller that reads nothing of the answer (T left as unknown) always fits.
 */
export type AnswerCheck<M extends ApiMethod, T> = unknown extends T ? [] : [Extract<ApiAnswer<M>, T>] extends [never]
  ? [error: `no ${Uppercase<M>} operation of the API answers the type expected here; regenerate api-schema.ts or fix the expected type`]
  : [];

/** ApiDriveGrant is a stored Taildrive grant (GET /api/v1/drive). */
export type ApiDriveGrant = Schemas['DriveGrant'];
export type ApiDriveEnd = ApiDriveGrant['src'];
/** ApiOAuthClient is an OAuth client of /api/v2 (GET /api/v1/oauthclient; never its secret). */
export type ApiOAuthClient = Schemas['OAuthClient'];
