import 'zod-openapi';
import { z } from 'zod';
import { badField, ERRORS, HeadwayError, shown, type ErrorCode } from '@headway/core';
import { LATEST_TIME, parseDuration, rfc3339Time } from '@headway/core';

/*
 * The REST API's shapes as zod schemas: one source for request validation (routes.ts),
 * the OpenAPI document (openapi.ts), the views' return types (views.ts) and, through
 * the document, the CLI's TypeScript types (cli/src/api-schema.ts).
 *
 * Resource schemas (User, Node, ...) describe what the server sends: ids are strings,
 * times RFC 3339 in UTC, field names camelCase as headscale's JSON gateway spells them.
 * A schema with a meta `id` becomes a named component of the document.
 */

// ---- what the server sends ----

/** Id is a database id as the API spells it: a decimal string (headscale's uint64 in JSON). */
export const Id = z.string().regex(/^\d+$/).meta({ description: 'Numeric id as a decimal string', examples: ['1'] });

/** Time is an RFC 3339 time in UTC, as Date.toISOString writes it. */
export const Time = z.iso.datetime().meta({
  description: 'RFC 3339 time (UTC)',
  examples: ['2026-01-02T15:04:05.000Z'],
  // format: date-time says it; zod's calendar-checking regex would only clutter the document.
  override: ({ jsonSchema }) => { delete jsonSchema.pattern; },
});

export const UserSchema = z.object({
  id: Id,
  name: z.string().meta({ description: 'Unique user name (compared without case)', examples: ['alice'] }),
  displayName: z.string().meta({ description: 'Free-form display name; empty when not set', examples: ['Alice Liddell'] }),
  email: z.string().meta({ description: 'E-mail address; empty when not set', examples: ['alice@example.com'] }),
  profilePicUrl: z.string().meta({ description: 'Profile picture URL; empty when not set', examples: ['https://example.com/alice.png'] }),
  provider: z.string().meta({ description: "How the user logs in: 'oidc' for a user from an identity provider, empty for a local user", examples: ['oidc'] }),
  providerId: z.string().meta({ description: "The provider's stable identity (OIDC: <issuer>/<sub>); empty for a local user", examples: ['https://idp.example.com/248289761001'] }),
  groups: z.array(z.string()).meta({ description: "The provider's groups for the user (groups claim), refreshed at each login", examples: [['engineering']] }),
  createdAt: Time,
}).meta({ id: 'User', description: 'A user: owns nodes and pre-auth keys' });

export const REGISTER_METHODS = ['REGISTER_METHOD_AUTH_KEY', 'REGISTER_METHOD_CLI', 'REGISTER_METHOD_API', 'REGISTER_METHOD_DEBUG', 'REGISTER_METHOD_OIDC'] as const;

const prefixList = (description: string, example: string[]) => z.array(z.string()).meta({ description, examples: [example] });

export const PreAuthKeySchema = z.object({
  id: Id,
  key: z.string().meta({
    description: 'The key; in full only in the create answer, elsewhere redacted to hwkey-auth-<prefix>-***',
    examples: ['hwkey-auth-0123456789ab-***'],
  }),
  user: UserSchema.nullable().meta({ description: 'Owner of the nodes it registers; null for a tags-only key' }),
  reusable: z.boolean().meta({ description: 'Whether it registers more than one node' }),
  ephemeral: z.boolean().meta({ description: 'Whether nodes it registers are ephemeral' }),
  used: z.boolean().meta({ description: 'Whether a node registered with it' }),
  expiration: Time.nullable().meta({ description: 'When it stops working; null for never' }),
  createdAt: Time,
  aclTags: z.array(z.string()).meta({ description: 'Tags given to the nodes it registers', examples: [['tag:web']] }),
}).meta({ id: 'PreAuthKey', description: 'A pre-authentication key for `tailscale up --auth-key`' });

export const NodeSchema = z.object({
  id: Id,
  machineKey: z.string().meta({ description: 'Noise static key of the device', examples: [`mkey:${'a1'.repeat(32)}`] }),
  nodeKey: z.string().meta({ description: 'WireGuard public key; rotates on re-login', examples: [`nodekey:${'b2'.repeat(32)}`] }),
  discoKey: z.string().meta({ description: 'Disco key used for NAT traversal; empty before the first map request', examples: [`discokey:${'c3'.repeat(32)}`] }),
  ipAddresses: z.array(z.string()).meta({ description: 'Tailnet addresses, IPv4 first', examples: [['100.64.0.1', 'fd7a:115c:a1e0::1']] }),
  name: z.string().meta({ description: 'Hostname the device reported', examples: ['My Laptop'] }),
  givenName: z.string().meta({ description: 'DNS label the tailnet knows the node by (admin-renamable)', examples: ['my-laptop'] }),
  user: UserSchema.nullable().meta({ description: 'Owner; null for a node owned by its tags only' }),
  lastSeen: Time.nullable().meta({ description: 'When the node connected, while it stays connected; otherwise when it disconnected; null if never' }),
  expiry: Time.nullable().meta({ description: 'When the node key expires; null for never' }),
  createdAt: Time,
  registerMethod: z.enum(REGISTER_METHODS).meta({ description: 'How the node joined' }),
  tags: z.array(z.string()).meta({ description: 'ACL tags (tag:<name>), sorted', examples: [['tag:web']] }),
  online: z.boolean().meta({ description: 'Whether the node holds a map session now' }),
  ephemeral: z.boolean().meta({ description: 'Ephemeral nodes are deleted after going offline' }),
  approvedRoutes: prefixList('Subnet and exit routes an admin approved', ['10.0.0.0/24']),
  availableRoutes: prefixList('Routes the node advertises', ['10.0.0.0/24']),
  subnetRoutes: prefixList('Approved routes this node serves now (primary router)', ['10.0.0.0/24']),
  preAuthKey: PreAuthKeySchema.optional().meta({ description: 'The pre-auth key the node registered with (redacted), in node lists and gets; absent for a node that logged in otherwise or whose key is gone' }),
}).meta({ id: 'Node', description: 'A device in the tailnet' });

export const ApiKeySchema = z.object({
  id: Id,
  prefix: z.string().meta({ description: 'Public part of the key, used to name it', examples: ['0123456789ab'] }),
  expiration: Time.nullable().meta({ description: 'When it stops working; null for never' }),
  createdAt: Time,
  lastSeen: Time.nullable().meta({ description: 'When it last authenticated a request; null if never' }),
}).meta({ id: 'ApiKey', description: 'An API key (never its secret)' });

export const ERROR_CODES = Object.keys(ERRORS) as [ErrorCode, ...ErrorCode[]];

export const ProblemSchema = z.object({
  type: z.string().meta({ description: 'URI naming the problem type', examples: ['https://headway.dev/problems/invalid_field'] }),
  title: z.string().meta({ examples: ['Invalid field'] }),
  status: z.int().meta({ description: 'HTTP status code', examples: [400] }),
  detail: z.string().meta({ description: 'What went wrong, for people', examples: ['name: is required'] }),
  code: z.enum(ERROR_CODES).meta({ description: 'Stable machine-readable code' }),
  field: z.string().optional().meta({ description: 'The request field at fault, when one is', examples: ['name'] }),
  errors: z.array(z.string()).optional().meta({ description: 'Every problem found, when there are several (an invalid policy)' }),
  message: z.string().meta({ description: "The same text as detail, where headscale's API and the tools built for it read an error", examples: ['name: is required'] }),
}).meta({ id: 'Problem', description: 'RFC 9457 (7807) problem details, sent with every 4xx and 5xx answer' });

export type UserView = z.input<typeof UserSchema>;
export type NodeView = z.input<typeof NodeSchema>;
export type PreAuthKeyView = z.input<typeof PreAuthKeySchema>;
export type ApiKeyView = z.input<typeof ApiKeySchema>;
export type ProblemView = z.input<typeof ProblemSchema>;

/** NodeAnswer is the answer of calls that return one node. */
export const NodeAnswer = z.object({ node: NodeSchema });

/** Empty is the answer of calls that only report success. */
export const Empty = z.object({}).meta({ description: 'Empty object: the call succeeded' });

// ---- what the server accepts ----

/**
 * optional treats JSON null as absent, as headscale's gateway does, so a client that
 * sends `"expiration": null` gets the default rather than a type error.
 */
export function optional<T extends z.ZodType>(schema: T) {
  return schema.nullish().transform((v): z.output<T> | undefined => v ?? undefined);
}

/** numericId is an id in a path or body: decimal digits, parsed to a number (one past 2^53 - 1 no id reaches,
 * which a number would round to another id, is refused). */
export const numericId = (description = 'Numeric id') =>
  z.string()
    .regex(/^\d+$/, { error: (iss) => `expected a numeric id, found ${shown(iss.input)}` })
    .refine((v) => !/^\d+$/.test(v) || Number.isSafeInteger(Number(v)), { error: (iss) => `id ${JSON.stringify(String(iss.input).slice(0, 40))} is too large (at most ${Number.MAX_SAFE_INTEGER})` })
    .transform(Number)
    .meta({ description, examples: ['1'] });

/**
 * expiration reads an expiration field: an RFC 3339 time or a duration from now (`24h`, `90d`); absent or empty
 * is none. One past 9999-12-31 is refused (a long enough duration made a Date the databases cannot store: a 500).
 */
export function expiration(v: string | undefined, field = 'expiration'): Date | null {
  if (!v) return null;
  const d = parseDuration(v);
  const at = d !== undefined ? new Date(Date.now() + d) : rfc3339Time(v);
  if (!at) throw badField(field, `expected an RFC 3339 time or a duration such as 24h, found ${JSON.stringify(v.slice(0, 80))}`);
  if (!(at.getTime() <= LATEST_TIME)) throw badField(field, `${JSON.stringify(v.slice(0, 80))} is after 9999-12-31T23:59:59Z`);
  return at;
}

/**
 * idText accepts a decimal string or a JSON integer and reads it as a string: headscale's
 * gateway takes uint64 fields either way, so ported scripts send both.
 */
export const idText = () => z.union([z.string(), z.int().nonnegative().transform(String)]);

/** queryText is an optional query parameter; an empty value (`?name=`) reads as absent. */
export const queryText = (description: string, example: string) =>
  z.string().optional().transform((v) => (v === '' ? undefined : v)).meta({ description, examples: [example] });

/** expirationText is an RFC 3339 time or a duration from now (`24h`, `90d`); null means never. */
export const expirationText = optional(z.string()).meta({
  description: 'When it stops working: an RFC 3339 time, or a duration from now such as 24h or 90d; absent or null for never',
  examples: ['2027-01-01T00:00:00Z'],
});

// ---- turning zod issues into problems ----

const KIND: Record<string, string> = {
  string: 'a string', number: 'a number', int: 'an integer', boolean: 'true or false', array: 'a list', object: 'an object', null: 'null',
};

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'number') return Number.isInteger(v) ? `the number ${v}` : 'a number';
  return KIND[typeof v] ?? typeof v;
}

/**
 * apiErrorMap words zod's issues the way the API always has: a missing field
 * "is required", a wrong type says what was expected and what came. A schema's own
 * `error` wins over it (zod asks the schema first).
 */
export const apiErrorMap: z.core.$ZodErrorMap = (iss) => {
  if (iss.code === 'invalid_type' || iss.code === 'invalid_union') {
    if (iss.input === undefined) return 'is required';
    if (iss.code === 'invalid_type') return `expected ${KIND[iss.expected] ?? iss.expected}, found ${kindOf(iss.input)}`;
    const expected = [...new Set(iss.errors.map((list) => list[0]).filter((i) => i?.code === 'invalid_type').map((i) => KIND[(i as { expected: string }).expected] ?? (i as { expected: string }).expected))];
    if (expected.length) return `expected ${expected.join(' or ')}, found ${kindOf(iss.input)}`;
  }
  return undefined;
};

/** fieldPath spells an issue's path as a client wrote it: `routes[2]`, `user.name`. */
function fieldPath(path: PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

/**
 * parseInput checks one part of a request (path, query or body) against its schema and
 * returns the typed value, or throws a 400 naming the first bad field.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const r = schema.safeParse(value, { error: apiErrorMap });
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  // A strict object's extra key is reported on the object; name the key itself, so a misspelt
  // field (`acess`) is the field the client is told about.
  const unknownKey = issue.code === 'unrecognized_keys' ? issue.keys[0] : undefined;
  const field = fieldPath(unknownKey === undefined ? issue.path : [...issue.path, unknownKey]);
  const more = r.error.issues.length > 1 ? ` (and ${r.error.issues.length - 1} more)` : '';
  const reason = unknownKey === undefined ? issue.message.replace(/^Invalid input: /, '') : 'unknown field';
  if (!field) throw new HeadwayError('invalid_json', `${reason}${more}`);
  throw new HeadwayError('invalid_field', `${field}: ${reason}${more}`, field);
}

/** ClusterInstanceSchema is one instance sharing the database, as `headway cluster status` lists it. */
export const ClusterInstanceSchema = z.object({
  id: z.string().meta({ description: 'Instance id (random, new at every start)' }),
  address: z.string().meta({ description: 'cluster.advertise_addr, else the address it listens on', examples: ['http://10.0.0.5:8080'] }),
  startedAt: Time,
  heartbeat: Time.meta({ description: 'When it last wrote its heartbeat' }),
  sessions: z.number().int().meta({ description: 'Map streams it holds (at its last heartbeat; live for the answering instance)' }),
  live: z.boolean().meta({ description: 'Its heartbeat is newer than cluster.instance_timeout' }),
  self: z.boolean().meta({ description: 'This is the instance that answered' }),
  jobs: z.boolean().meta({ description: 'It holds the jobs lease (ephemeral-node GC, expired logins); known for the answering instance only' }),
}).meta({ id: 'ClusterInstance' });
