import type { Context } from 'koa';
import { z } from 'zod';
import type { HeadwayConfig } from '@headway/core';
import type { State } from '@headway/core';
import type { DnsSettingsService, PolicyService } from '@headway/core';
import { BODY_LIMIT, camelKeys, readJson } from './http.js';
import { parseInput } from './schemas.js';
import { nodeView, preAuthKeyView } from './views.js';
import type { NodeView, PreAuthKeyView } from './schemas.js';
import type { Node } from '@headway/core';
import type { PendingLogins, SshCheckApprovals } from './lifecycle.js';
import type { AuditLog, DriveService } from '@headway/core';
import type { OAuthTokens } from './v2/auth.js';
import type { Scope } from './v2/scopes.js';

/*
 * route.ts holds the route table's machinery (ApiDeps, the typed route() builder) apart
 * from the table itself, so modules that contribute routes (lifecycle.ts, drive.ts) can use
 * route() without an import cycle through routes.ts.
 */

export interface ApiDeps {
  state: State;
  policy: PolicyService;
  config: HeadwayConfig;
  /** logins approves or rejects pending interactive logins (the registrar; /api/v1/auth/...). */
  logins?: PendingLogins;
  /** sshChecks approves or rejects held SSH connections of `check` rules, whose auth IDs `auth approve|reject` take too. */
  sshChecks?: SshCheckApprovals;
  /** primaryRoutes: routes a node is the primary router for (from the route manager). */
  primaryRoutes?: (nodeId: number) => string[];
  /** approveRoutes: RouteService.approve (approval, auto-approvals and primary election in one commit). */
  approveRoutes?: (nodeId: number, routes: string[]) => Promise<import('@headway/core').Node>;
  health: () => Promise<boolean>;
  /** providerIdFor turns a bare subject into the configured login method's provider identity (users link). */
  providerIdFor?: (subject: string) => { provider: string; providerId: string };
  /** drive manages Taildrive grants (/api/v1/drive); absent in tests that build the API alone. */
  drive?: DriveService;
  /** cluster lists the instances sharing the database (cluster.enabled); absent on a single instance. */
  cluster?: () => Promise<import('@headway/core').ClusterInstanceView[]>;
  /** instanceId names this running server on /health answers (server/reach.ts); absent in tests that build the API alone. */
  instanceId?: string;
  /** dns holds the DNS settings in force and changes them (dns.mode: database); absent in tests that build the API alone. */
  dns?: DnsSettingsService;
  /** oauth verifies /api/v2 access tokens of OAuth clients; absent: only API keys authenticate /api/v2. */
  oauth?: OAuthTokens;
  /** audit records every change made through the APIs; absent in tests that build the API alone. */
  audit?: AuditLog;
  /**
   * consoleAuth recognises a request of the admin console's pages by its session cookie (and, for a change, its CSRF
   * header): the actor, a refusal, or undefined when the request carries no console session. Absent: the console is off.
   */
  consoleAuth?: (ctx: Context) => Promise<ConsoleAuthAnswer | undefined>;
  /** about names the running build, the database and the served certificate (GET /api/v1/server); absent in tests that build the API alone. */
  about?: () => ServerAbout;
  /** dnsRecords lists the extra DNS records devices receive, each with where it comes from (GET /api/v1/dns). */
  dnsRecords?: () => Array<{ name: string; type: string; value: string; source: string }>;
}

/** ServerAbout is what only the running server knows of itself: its build, its database and its TLS certificate. */
export interface ServerAbout {
  version: string;
  commit: string;
  database: { type: string; description: string };
  /** tls: the certificate the main listener serves (Let's Encrypt's or tls_cert_path's); null when it serves plain HTTP. */
  tls: { source: 'letsencrypt' | 'tls_cert_path'; notAfter: string | null; status: 'pass' | 'warn' | 'fail' } | null;
}

/** ConsoleAuthAnswer: a console session's actor (`console:<admin>`), or why its request is refused (403 csrf_failed). */
export type ConsoleAuthAnswer = { actor: string } | { status: 403; code: 'csrf_failed'; message: string };

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** TAGS group the operations in the OpenAPI document and on the docs page, in this order. */
export const TAGS = {
  Users: 'People and service accounts that own nodes and pre-auth keys',
  Nodes: 'Devices in the tailnet',
  'Pre-auth keys': 'Keys that register devices without an interactive login',
  'API keys': 'Keys for this API',
  'OAuth clients': "Clients of /api/v2's OAuth client-credentials grant",
  Policy: 'The access policy (HuJSON, Tailscale ACL syntax)',
  Drive: 'Taildrive grants kept in the database (the @headway/drive-db adapter)',
  Health: 'Server health',
  Cluster: 'Instances sharing one database (cluster.enabled)',
  Server: 'The running server: build, database, certificate, counts, DNS in force',
  Audit: 'Who changed what, when and from where',
  Debug: 'Helpers for tests and demos',
} as const;
/** V2_TAGS group /api/v2's operations (Tailscale's API) in its own document. */
export const V2_TAGS = {
  Devices: 'Devices in the tailnet',
  Keys: 'Auth keys and API keys',
  'OAuth': 'OAuth clients and access tokens',
  'Policy File': 'The access policy',
  DNS: 'MagicDNS, nameservers, search paths, split DNS',
  Users: 'Users',
  'Tailnet Settings': 'Settings of the tailnet',
  'Not served': 'Parts of the Tailscale API Headway does not have',
} as const;
export type Tag = keyof typeof TAGS | `v2:${keyof typeof V2_TAGS}`;

/**
 * Statuses a route may answer with a problem besides 401 and 500 (every route) and the
 * ones its inputs imply (400 for any input, 413 for a body): list them in `errors`.
 */
export type ErrorStatus = 400 | 403 | 404 | 409 | 412 | 501 | 503;

/** TextBody describes a body a handler reads as text: its content types (each a string schema in the document) and what it is. */
export interface TextBody { types: string[]; description: string; required: boolean }

type Parsed<S> = S extends z.ZodType ? z.output<S> : Record<string, never>;

/** RouteInput is a request after validation: path parameters, query and body, typed by the route's schemas. */
export interface RouteInput<P, Q, B> { params: P; query: Q; body: B }

/**
 * RouteSpec is one REST operation with its contract. Everything the router, the
 * request validation and the OpenAPI document need comes from here, so adding a
 * route is one entry in ROUTES.
 */
export interface RouteSpec<P extends z.ZodObject | undefined, Q extends z.ZodObject | undefined, B extends z.ZodType | undefined, R extends z.ZodType> {
  method: Method;
  /** path in koa form, e.g. /api/v1/node/:id; every :name has a key in `params`. */
  path: string;
  /** operationId names the operation in the document and in generated clients. */
  operationId: string;
  tag: Tag;
  summary: string;
  /** description says what the call does beyond the summary: conditions, side effects, headscale differences. */
  description: string;
  params?: P;
  query?: Q;
  /** body is a JSON object; headscale's snake_case names are read as camelCase before validation. */
  body?: B;
  /** bodyLimit caps the body in bytes (default BODY_LIMIT). */
  bodyLimit?: number;
  /** bodyKeysAsSent: the body's keys are data (domain names), not read as camelCase. */
  bodyKeysAsSent?: boolean;
  /** textBody: the handler reads the body as text itself (readText), in one of these content types (documented, and 413 above its limit). */
  textBody?: TextBody;
  /** response is the 200 body. */
  response: R;
  responseDescription: string;
  /** also: another status that answers with the same schema (health's 503). */
  also?: { status: 503; description: string };
  errors?: ErrorStatus[];
  /** scope: what an /api/v2 route needs of an OAuth token ('public': no credential, the token endpoint). */
  scope?: Scope | 'public';
  /** readOnly: a POST that changes nothing (a check, a preview, a token exchange); not recorded in the audit log. */
  readOnly?: true;
  handle: (input: RouteInput<Parsed<P>, Parsed<Q>, Parsed<B>>, deps: ApiDeps, ctx: Context) => Promise<z.input<R>>;
}

/** Route is a RouteSpec with its types erased, as the router and the document generator walk them. */
export interface Route {
  method: Method;
  path: string;
  operationId: string;
  tag: Tag;
  summary: string;
  description: string;
  params?: z.ZodObject;
  query?: z.ZodObject;
  body?: z.ZodType;
  bodyLimit?: number;
  bodyKeysAsSent?: boolean;
  textBody?: TextBody;
  response: z.ZodType;
  responseDescription: string;
  also?: { status: 503; description: string };
  errors: ErrorStatus[];
  scope?: Scope | 'public';
  readOnly?: true;
  /** handler validates the request against the schemas (400 naming the field) and runs the route. */
  handler: (ctx: Context, deps: ApiDeps) => Promise<unknown>;
}

/** pathParams lists the :names of a koa path. */
export const pathParams = (path: string) => [...path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]!);

/**
 * route checks a spec (its path parameters and `params` must name the same keys) and
 * wraps its handler in validation, so no handler sees unchecked input.
 */
export function route<P extends z.ZodObject | undefined = undefined, Q extends z.ZodObject | undefined = undefined, B extends z.ZodType | undefined = undefined, R extends z.ZodType = z.ZodType>(
  spec: RouteSpec<P, Q, B, R>,
): Route {
  const declared = spec.params ? Object.keys(spec.params.shape).sort() : [];
  const inPath = pathParams(spec.path).sort();
  if (declared.join() !== inPath.join()) {
    throw new Error(`route ${spec.method} ${spec.path}: params declares [${declared.join(', ')}] but the path has [${inPath.join(', ')}]`);
  }
  const { handle, errors, ...rest } = spec;
  return {
    ...rest,
    errors: errors ?? [],
    handler: async (ctx, deps) => {
      const params = spec.params ? parseInput(spec.params, { ...ctx.params }) : {};
      const query = spec.query ? parseInput(spec.query, camelKeys({ ...ctx.query })) : {};
      const body = spec.body ? parseInput(spec.body, await readJson(ctx, spec.bodyLimit ?? BODY_LIMIT, !spec.bodyKeysAsSent)) : {};
      return handle({ params, query, body } as RouteInput<Parsed<P>, Parsed<Q>, Parsed<B>>, deps, ctx);
    },
  };
}

/** apiNode is a node as the API answers it, with the primary routes RouteService elected; `listed`: as a node list shows it. */
export function apiNode(deps: ApiDeps, n: Node, preAuthKey?: PreAuthKeyView, listed = false): NodeView {
  return nodeView(n, deps.state, deps.primaryRoutes && ((x) => deps.primaryRoutes!(x.id)), preAuthKey, listed);
}

/** apiNodesWithKeys answers nodes each with the pre-auth key it registered with (one key lookup per call), as headscale's node list and get do. */
export async function apiNodesWithKeys(deps: ApiDeps, nodes: Node[], listed = false): Promise<NodeView[]> {
  const keyIds = new Set(nodes.map((n) => n.authKeyId).filter((x): x is number => x !== null));
  const keys = new Map<number, PreAuthKeyView>();
  if (keyIds.size) {
    for (const k of await deps.state.keys.listPreAuthKeys()) if (keyIds.has(k.id)) keys.set(k.id, preAuthKeyView(k, deps.state));
  }
  return nodes.map((n) => apiNode(deps, n, n.authKeyId !== null ? keys.get(n.authKeyId) : undefined, listed));
}
