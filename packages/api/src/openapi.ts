import { z } from 'zod';
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiPathsObject, type ZodOpenApiResponseObject } from 'zod-openapi';
import type { ErrorCode } from '@headway/core';
import { ERRORS } from '@headway/core';
import { ROUTES, TAGS, type Route } from './routes.js';
import { V2_TAGS } from './route.js';
import { ProblemSchema } from './schemas.js';
import { V2_ROUTES } from './v2/routes.js';
import { V2_TOKEN_PATH } from './v2/oauth.js';
import { SCOPE_RESOURCES, scopeName } from './v2/scopes.js';

/** API_VERSION is the document's info.version: the API's own version, not the server's. */
export const API_VERSION = '1.0.0';

/** DOC_PATHS are the unauthenticated routes that serve the contract and its reference page. */
export const DOC_PATHS = { document: '/api/v1/openapi.json', v2Document: '/api/v2/openapi.json', page: '/api/v1/docs', swagger: '/swagger' } as const;


function problemExample(code: ErrorCode, detail: string, field?: string) {
  return { type: `https://headway.dev/problems/${code}`, title: ERRORS[code].title, status: ERRORS[code].status, detail, code, ...(field ? { field } : {}), message: detail };
}

/** problemResponse is a shared error answer; its `id` makes it one entry under components.responses. */
function problemResponse(id: string, description: string, examples: Record<string, ReturnType<typeof problemExample>>): ZodOpenApiResponseObject {
  return {
    id,
    description,
    content: {
      'application/problem+json': {
        schema: ProblemSchema,
        examples: Object.fromEntries(Object.entries(examples).map(([name, value]) => [name, { value }])),
      },
    },
  };
}

const PROBLEMS = {
  400: problemResponse('BadRequest', 'The request is invalid; `field` names the input at fault', {
    invalidField: problemExample('invalid_field', 'name: is required', 'name'),
    invalidJson: problemExample('invalid_json', 'body is not JSON: Unexpected end of JSON input'),
  }),
  401: problemResponse('Unauthorized', 'No API key, or one that is invalid, expired or revoked', {
    missing: problemExample('unauthorized', 'missing API key (Authorization: Bearer <API key>)'),
  }),
  403: problemResponse('Forbidden', "The credential is valid but may not do this (an OAuth token's scopes or tags)", {
    scope: problemExample('forbidden', "this token's scopes (devices:core:read) do not include auth_keys"),
  }),
  404: problemResponse('NotFound', 'Something the request names does not exist', {
    notFound: problemExample('not_found', 'node 42 not found'),
  }),
  409: problemResponse('Conflict', 'The request conflicts with the current state (a name in use, a user that still owns nodes)', {
    nameTaken: problemExample('name_taken', 'user alice already exists', 'name'),
    userHasNodes: problemExample('user_has_nodes', 'user alice still owns 2 nodes; delete them first'),
  }),
  412: problemResponse('PreconditionFailed', 'If-Match names a version that is no longer current', {
    stale: problemExample('precondition_failed', 'the policy changed since the version in If-Match'),
  }),
  413: problemResponse('PayloadTooLarge', 'The body exceeds the size limit', {
    tooLarge: problemExample('payload_too_large', 'request body exceeds the 1048576-byte limit'),
  }),
  500: problemResponse('InternalError', 'An unexpected failure; the server log has the details', {
    internal: problemExample('internal', 'internal error; see the server log'),
  }),
  501: problemResponse('NotImplemented', 'A part of the Tailscale API this server does not have', {
    notServed: problemExample('not_implemented', 'webhooks are not available on a Headway server'),
  }),
  503: problemResponse('Unavailable', 'A service the call needs is not available', {
    unavailable: problemExample('unavailable', 'interactive registration is not available'),
  }),
} as const;

/** errorStatuses lists every problem status a route can answer, from its inputs and its `errors`. */
export function errorStatuses(r: Route): Array<keyof typeof PROBLEMS> {
  const set = new Set<keyof typeof PROBLEMS>([401, 500, ...r.errors]);
  if (r.params || r.query || r.body) set.add(400);
  if (r.body || r.textBody) set.add(413);
  if (r.textBody) set.add(400);
  if (r.also?.status === 503) set.delete(503);
  return [...set].sort((a, b) => a - b);
}

/** openApiPath turns a koa path (/api/v1/node/:id) into an OpenAPI one (/api/v1/node/{id}). */
export const openApiPath = (path: string) => path.replace(/:([A-Za-z_]+)/g, '{$1}');

/** acceptsEmptyBody tells whether a route's body schema accepts `{}`, i.e. the body may be left out. */
function acceptsEmptyBody(r: Route): boolean {
  return r.body !== undefined && r.body.safeParse({}).success;
}

/** security is what an operation accepts: v1's API key; v2's API key (bearer or basic) or an OAuth token with the route's scope. */
function security(r: Route, api: Api): ZodOpenApiOperationObject['security'] {
  if (api === 'v1') return [{ bearer: [] }];
  if (r.scope === 'public') return [];
  return [{ bearer: [] }, { basic: [] }, ...(r.scope ? [{ oauth2: [scopeName(r.scope)] }] : [])];
}

function operation(r: Route, api: Api): ZodOpenApiOperationObject {
  const responses: ZodOpenApiOperationObject['responses'] = {
    200: { description: r.responseDescription, content: { 'application/json': { schema: r.response } } },
  };
  if (r.also) responses[String(r.also.status) as '503'] = { description: r.also.description, content: { 'application/json': { schema: r.response } } };
  for (const status of errorStatuses(r)) responses[String(status) as `${typeof status}`] = PROBLEMS[status];
  return {
    operationId: r.operationId,
    summary: r.summary,
    ...(r.description ? { description: r.description } : {}),
    tags: [r.tag.replace(/^v2:/, '')],
    security: security(r, api),
    ...(r.params || r.query ? { requestParams: { ...(r.params ? { path: r.params } : {}), ...(r.query ? { query: r.query } : {}) } } : {}),
    ...(r.body ? {
      requestBody: {
        required: !acceptsEmptyBody(r),
        description: 'JSON object; headscale-style snake_case field names are accepted too',
        content: { 'application/json': { schema: r.body } },
      },
    } : {}),
    ...(r.textBody ? {
      requestBody: {
        required: r.textBody.required, description: r.textBody.description,
        content: Object.fromEntries(r.textBody.types.map((t) => [t, { schema: { type: 'string' as const } }])),
      },
    } : {}),
    responses,
  };
}

/** Api names a document: /api/v1 (headscale's API) or /api/v2 (Tailscale's). */
export type Api = 'v1' | 'v2';

const V2_SCOPES: Record<string, string> = Object.fromEntries([
  ['all', 'every resource, read and write'], ['all:read', 'every resource, read only'],
  ...Object.entries(SCOPE_RESOURCES).flatMap(([name, what]) => [[name, what], [`${name}:read`, `${what} (read only)`]]),
]);

/** DOCUMENTS: per API, its routes, tags, info and security schemes; one generator renders both. */
const DOCUMENTS = {
  v1: {
    routes: () => ROUTES, tags: TAGS, title: 'Headway API', summary: 'Administration API of a Headway coordination server',
    description: [
      "Paths and JSON field names follow headscale's v1 API, so its clients and scripts work against Headway.",
      '',
      'Authenticate with an API key from `headway apikeys create`: `Authorization: Bearer <key>`. Requests over the local unix socket need no key (file permissions guard it).',
      '',
      'Ids are decimal strings and times RFC 3339. Request bodies are JSON objects, read as JSON whatever their Content-Type says (as headscale reads them); headscale-style snake_case names, in bodies and query strings, are read as camelCase. Every failure is an RFC 9457 problem (`application/problem+json`) with a stable `code`, for bad input the `field` at fault, and `message` repeating `detail` (the field headscale errors carry their text in).',
    ].join('\n'),
    securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'An API key from `headway apikeys create`' } },
  },
  v2: {
    routes: () => V2_ROUTES, tags: V2_TAGS, title: 'Headway: Tailscale API', summary: "Tailscale's public API (/api/v2) served by a Headway coordination server",
    description: [
      "Paths, JSON field names and error bodies follow Tailscale's API, so its official clients (the Go client, the Terraform provider, the Kubernetes operator) work against Headway. The tailnet in a path is `-` or the tailnet's name (dns.base_domain).",
      '',
      'Authenticate with an API key from `headway apikeys create`, as `Authorization: Bearer <key>` or as the basic-auth user name, or with an access token of an OAuth client (client-credentials grant), which may do what its scopes allow.',
      '',
      "Every failure carries `message`, the field Tailscale's clients read. Parts of Tailscale's API Headway does not have answer 501 (the `Not served` tag).",
    ].join('\n'),
    securitySchemes: {
      bearer: { type: 'http', scheme: 'bearer', description: 'An API key from `headway apikeys create`, or an OAuth access token' },
      basic: { type: 'http', scheme: 'basic', description: 'An API key as the user name, the password empty' },
      oauth2: { type: 'oauth2', description: 'An OAuth client\'s access token, limited to its scopes', flows: { clientCredentials: { tokenUrl: V2_TOKEN_PATH, scopes: V2_SCOPES } } },
    },
  },
} as const;

/**
 * openApiDocument is generated from a route table and its zod schemas, the same ones
 * that validate requests, so the document, the router and the validation cannot disagree.
 * `serverUrl` is the server's own address (server_url) for `servers`; `api` picks the
 * document (default v1).
 */
export function openApiDocument(opts: { serverUrl?: string; api?: Api } = {}): Record<string, unknown> {
  const api = opts.api ?? 'v1';
  const spec = DOCUMENTS[api];
  const paths: ZodOpenApiPathsObject = {};
  for (const r of spec.routes()) {
    const item = (paths[openApiPath(r.path)] ??= {});
    item[r.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete'] = operation(r, api);
  }
  const serverUrl = (opts.serverUrl ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  const doc = createDocument({
    openapi: '3.1.0',
    info: {
      title: spec.title,
      version: API_VERSION,
      summary: spec.summary,
      description: spec.description,
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [{ url: serverUrl, description: 'This server (server_url)' }],
    tags: Object.entries(spec.tags).map(([name, description]) => ({ name, description })),
    paths,
    components: { securitySchemes: spec.securitySchemes },
  }, {
    // zod leaves out the `examples` of a schema with a transform (they are typed as its
    // output) when rendering a request; the request fields' examples are inputs, so keep them.
    override: ({ jsonSchema, zodSchema, io }) => {
      const examples = (z.globalRegistry.get(zodSchema) as { examples?: unknown[] } | undefined)?.examples;
      if (io === 'input' && examples && !jsonSchema.examples) jsonSchema.examples = examples;
    },
  });
  return JSON.parse(JSON.stringify(doc)) as Record<string, unknown>;
}
