/**
 * headscale's gRPC admin API (headscale.v1.HeadscaleService, headscale v0.29.2) over the
 * same services as the REST API: every call is a thin translation between proto
 * messages and the calls the REST routes make (api/operations.ts, State,
 * PolicyService), so headscale's CLI in remote mode and its gRPC clients manage
 * Headway unchanged. server/grpc.ts puts it on grpc_listen_addr.
 *
 * The .proto files (packages/api/proto) are loaded at start-up with
 * @grpc/proto-loader rather than compiled to code: the contract stays readable in one
 * place, and there is no generator to keep in step with the TypeScript build.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { badField, HeadwayError, safeErrorText, shown, type ErrorCode } from '@headway/core';
import type { Logger } from '@headway/core';
import type { Node } from '@headway/core';
import { BODY_LIMIT, POLICY_LIMIT } from './http.js';
import * as ops from './operations.js';
import { apiNodesWithKeys, type ApiDeps } from './route.js';
import type { ApiKeyView, NodeView, PreAuthKeyView, UserView } from './schemas.js';
import { LATEST_TIME } from '@headway/core';
import { apiKeyView, preAuthKeyView, userView } from './views.js';
import { describeFields, recordCall } from './audit.js';

/** GRPC_POLICY_LIMIT is the largest SetPolicy or CheckPolicy message: the REST API's policy body limit. */
export const GRPC_POLICY_LIMIT = POLICY_LIMIT;

/** PROTO_DIR holds headscale/v1/*.proto; this file runs from dist/src/api (or src/api under a TypeScript loader). */
const PROTO_DIR = [new URL('../../../proto/', import.meta.url), new URL('../../proto/', import.meta.url)]
  .map((u) => fileURLToPath(u))
  .find((d) => existsSync(`${d}/headscale/v1/headscale.proto`)) ?? fileURLToPath(new URL('../../../proto/', import.meta.url));

let definition: grpc.ServiceDefinition | undefined;

/**
 * headscaleServiceDefinition loads HeadscaleService once. Fields keep their proto
 * names (snake_case); 64-bit integers arrive as decimal strings (ids are checked, not
 * rounded); absent fields read as their zero value and absent messages as null.
 */
export function headscaleServiceDefinition(): grpc.ServiceDefinition {
  if (!definition) {
    const pkg = protoLoader.loadSync('headscale/v1/headscale.proto', {
      includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true,
    });
    definition = pkg['headscale.v1.HeadscaleService'] as grpc.ServiceDefinition;
  }
  return definition;
}

// ---- proto shapes ----

/** Timestamp is google.protobuf.Timestamp as proto-loader reads and writes it. */
export interface Timestamp { seconds: string; nanos: number }
type Message = Record<string, unknown>;

function timestamp(iso: string | null | undefined): Timestamp | null {
  if (!iso) return null;
  const ms = Date.parse(iso);
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}

/** EARLIEST_TIME: 0001-01-01T00:00:00Z, the first time an RFC 3339 year (four digits) holds. */
const EARLIEST_TIME = Date.parse('0001-01-01T00:00:00Z');

/** time reads a Timestamp field (null when absent); one outside what a Date holds is refused naming the field. */
function time(ts: Timestamp | null | undefined, field: string): Date | undefined {
  if (!ts) return undefined;
  const ms = Number(ts.seconds) * 1000 + Math.floor((ts.nanos ?? 0) / 1_000_000);
  const d = new Date(ms);
  if (!Number.isFinite(ms) || Number.isNaN(d.getTime()) || ms > LATEST_TIME || ms < EARLIEST_TIME) throw badField(field, `expected a time between years 1 and 9999, found ${ts.seconds} seconds`);
  return d;
}

/** id reads a uint64 id; 0 is "not given" (proto3 has no absent scalar). */
function id(v: unknown, field: string): number {
  const n = Number(v ?? 0);
  if (!Number.isSafeInteger(n) || n < 0) throw badField(field, `expected an id below 2^53, found ${String(v)}`);
  return n;
}

/** REGISTER_METHOD maps Headway's register methods onto headscale's enum, which has no API or debug entry. */
const REGISTER_METHOD: Record<NodeView['registerMethod'], string> = {
  REGISTER_METHOD_AUTH_KEY: 'REGISTER_METHOD_AUTH_KEY',
  REGISTER_METHOD_CLI: 'REGISTER_METHOD_CLI',
  // headscale registers through its API (RegisterNode, AuthRegister) with the CLI method.
  REGISTER_METHOD_API: 'REGISTER_METHOD_CLI',
  REGISTER_METHOD_DEBUG: 'REGISTER_METHOD_UNSPECIFIED',
  REGISTER_METHOD_OIDC: 'REGISTER_METHOD_OIDC',
};

export function userProto(u: UserView | null): Message | null {
  if (!u) return null;
  return {
    id: u.id, name: u.name, created_at: timestamp(u.createdAt), display_name: u.displayName, email: u.email,
    provider_id: u.providerId, provider: u.provider, profile_pic_url: u.profilePicUrl,
  };
}

export function preAuthKeyProto(k: PreAuthKeyView): Message {
  return {
    user: userProto(k.user ?? null), id: k.id, key: k.key, reusable: k.reusable, ephemeral: k.ephemeral, used: k.used,
    expiration: timestamp(k.expiration), created_at: timestamp(k.createdAt), acl_tags: k.aclTags,
  };
}

export function nodeProto(n: NodeView, preAuthKey?: PreAuthKeyView): Message {
  return {
    id: n.id, machine_key: n.machineKey, node_key: n.nodeKey, disco_key: n.discoKey, ip_addresses: n.ipAddresses,
    name: n.name, user: userProto(n.user ?? null), last_seen: timestamp(n.lastSeen), expiry: timestamp(n.expiry),
    pre_auth_key: preAuthKey ? preAuthKeyProto(preAuthKey) : null, created_at: timestamp(n.createdAt),
    register_method: REGISTER_METHOD[n.registerMethod], given_name: n.givenName, online: n.online,
    approved_routes: n.approvedRoutes, available_routes: n.availableRoutes, subnet_routes: n.subnetRoutes, tags: n.tags,
  };
}

export function apiKeyProto(k: ApiKeyView): Message {
  return { id: k.id, prefix: k.prefix, expiration: timestamp(k.expiration), created_at: timestamp(k.createdAt), last_seen: timestamp(k.lastSeen) };
}

/** nodesProto answers nodes as the REST API shows them, each with the pre-auth key it registered with; `listed`: as a node list shows them. */
async function nodesProto(deps: ApiDeps, nodes: Node[], listed = false): Promise<Message[]> {
  return (await apiNodesWithKeys(deps, nodes, listed)).map((v) => nodeProto(v, v.preAuthKey));
}

const oneNode = async (deps: ApiDeps, n: Node) => ({ node: (await nodesProto(deps, [n]))[0] });
const text = (v: unknown) => (typeof v === 'string' ? v : '');
const list = (v: unknown) => (Array.isArray(v) ? v.map(String) : []);

// ---- the calls ----

type Handler = (req: Message, deps: ApiDeps) => Promise<Message>;

/**
 * HANDLERS implements every rpc of HeadscaleService v0.29.2. Where headscale and
 * Headway differ the REST API's behaviour wins (the same service layer answers both);
 * the differences are noted at the call.
 */
export const HANDLERS: Record<string, Handler> = {
  // ---- users ----
  CreateUser: async (r, { state }) => ({
    user: userProto(userView(await state.users.create({ name: text(r.name), displayName: text(r.display_name), email: text(r.email), profilePicUrl: text(r.picture_url) }))),
  }),
  RenameUser: async (r, { state }) => ({ user: userProto(userView(await state.users.rename(id(r.old_id, 'old_id'), text(r.new_name)))) }),
  // A user who still owns nodes is refused (FAILED_PRECONDITION), as DELETE /api/v1/user/:id is.
  DeleteUser: async (r, { state }) => { await state.users.delete(id(r.id, 'id')); return {}; },
  // Every filter given must match (zero values are no filter).
  ListUsers: async (r, { state }) => {
    const uid = id(r.id, 'id');
    const users = state.users.list({ id: uid || undefined, name: text(r.name) || undefined, email: text(r.email) || undefined });
    return { users: users.map((u) => userProto(userView(u))) };
  },

  // ---- pre-auth keys ----
  // No expiration means the key never expires.
  CreatePreAuthKey: async (r, deps) => {
    const uid = id(r.user, 'user');
    const user = uid ? deps.state.users.get(uid) : null;
    if (uid && !user) throw new HeadwayError('not_found', `user ${uid} not found`);
    const { key, secret } = await ops.createPreAuthKey(deps, {
      user: user ?? null, reusable: Boolean(r.reusable), ephemeral: Boolean(r.ephemeral),
      expiration: time(r.expiration as Timestamp | null, 'expiration') ?? null, tags: list(r.acl_tags),
    });
    return { pre_auth_key: preAuthKeyProto(preAuthKeyView(key, deps.state, secret)) };
  },
  ExpirePreAuthKey: async (r, { state }) => { await state.keys.expirePreAuthKey(id(r.id, 'id')); return {}; },
  DeletePreAuthKey: async (r, { state }) => { await state.keys.deletePreAuthKey(id(r.id, 'id')); return {}; },
  ListPreAuthKeys: async (_r, { state }) => ({
    pre_auth_keys: (await state.keys.listPreAuthKeys()).sort((a, b) => a.id - b.id).map((k) => preAuthKeyProto(preAuthKeyView(k, state))),
  }),

  // ---- nodes ----
  // headscale parks a registration under `key` for a later AuthRegister; Headway stores the
  // node at once (POST /api/v1/debug/node). A `key` of the form mkey:<hex> is its machine key.
  DebugCreateNode: async (r, deps) => {
    const key = text(r.key);
    // Any other key is headscale's registration id, which Headway has no use for; one that says it is a machine key
    // must be one (mkey:zz is refused, as REST refuses it, not replaced by a random key).
    if (key.startsWith('mkey:') && !/^mkey:[0-9a-f]{64}$/.test(key)) throw badField('key', `expected mkey:<64 lower-case hex digits>, found ${shown(key)}`);
    return oneNode(deps, await ops.createDebugNode(deps, {
      user: text(r.user), name: text(r.name), machineKey: /^mkey:[0-9a-f]{64}$/.test(key) ? key : undefined, routes: list(r.routes),
    }));
  },
  GetNode: async (r, deps) => oneNode(deps, deps.state.nodes.require(id(r.node_id, 'node_id'))),
  // An empty list is refused (a tagged node keeps a tag), as POST /api/v1/node/:id/tags is.
  SetTags: async (r, deps) => oneNode(deps, await ops.setNodeTags(deps, id(r.node_id, 'node_id'), list(r.tags))),
  SetApprovedRoutes: async (r, deps) => oneNode(deps, await ops.approveNodeRoutes(deps, id(r.node_id, 'node_id'), list(r.routes))),
  RegisterNode: async (r, deps) => oneNode(deps, await ops.registerPendingNode(deps, { user: text(r.user), authId: text(r.key), authIdField: 'key' })),
  DeleteNode: async (r, { state }) => { await state.nodes.delete(id(r.node_id, 'node_id')); return {}; },
  ExpireNode: async (r, deps) => oneNode(deps, await ops.setNodeExpiry(deps, id(r.node_id, 'node_id'), {
    at: time(r.expiry as Timestamp | null, 'expiry'), disable: Boolean(r.disable_expiry),
  })),
  RenameNode: async (r, deps) => oneNode(deps, await deps.state.nodes.rename(id(r.node_id, 'node_id'), text(r.new_name))),
  ListNodes: async (r, deps) => ({ nodes: await nodesProto(deps, ops.listNodes(deps, text(r.user) || undefined), true) }),
  BackfillNodeIPs: async (r, deps) => {
    if (!r.confirmed) throw badField('confirmed', 'must be true: backfilling gives addresses to existing nodes');
    return { changes: await ops.backfillNodeIps(deps) };
  },

  // ---- pending interactive logins ----
  AuthRegister: async (r, deps) => oneNode(deps, await ops.registerPendingNode(deps, { user: text(r.user), authId: text(r.auth_id), authIdField: 'auth_id' })),
  AuthApprove: async (r, deps) => { await ops.approvePendingNode(deps, text(r.auth_id), 'auth_id'); return {}; },
  AuthReject: async (r, deps) => { await ops.rejectPendingNode(deps, text(r.auth_id), 'auth_id'); return {}; },

  // ---- API keys ----
  // No expiration means the key never expires.
  CreateApiKey: async (r, { state }) => ({ api_key: (await state.keys.createApiKey(time(r.expiration as Timestamp | null, 'expiration') ?? null)).secret }),
  ExpireApiKey: async (r, { state }) => { await state.keys.expireApiKey(ops.apiKeyRef({ id: id(r.id, 'id') || undefined, prefix: text(r.prefix) })); return {}; },
  ListApiKeys: async (_r, { state }) => ({ api_keys: (await state.keys.listApiKeys()).sort((a, b) => a.id - b.id).map((k) => apiKeyProto(apiKeyView(k))) }),
  DeleteApiKey: async (r, { state }) => { await state.keys.deleteApiKey(ops.apiKeyRef({ id: id(r.id, 'id') || undefined, prefix: text(r.prefix) })); return {}; },

  // ---- policy ----
  GetPolicy: async (_r, { policy }) => {
    const p = policy.current();
    return { policy: p.policy, updated_at: timestamp(p.updatedAt) };
  },
  SetPolicy: async (r, { policy }) => {
    const p = await policy.set(text(r.policy));
    return { policy: p.policy, updated_at: timestamp(p.updatedAt) };
  },
  // The answer has no field for warnings; an invalid policy is INVALID_ARGUMENT listing every error.
  CheckPolicy: async (r, { policy }) => { await policy.check(text(r.policy)); return {}; },

  // ---- health ----
  // headscale answers an error when the database does not; so does Headway (UNAVAILABLE).
  Health: async (_r, { health }) => {
    if (!(await health())) throw new HeadwayError('unavailable', 'the database does not answer');
    return { database_connectivity: true };
  },
};

// ---- errors ----

/** STATUS maps the error catalogue onto gRPC codes; a client's mistake is never INTERNAL. */
const STATUS: Record<ErrorCode, grpc.status> = {
  bad_request: grpc.status.INVALID_ARGUMENT,
  invalid_field: grpc.status.INVALID_ARGUMENT,
  invalid_json: grpc.status.INVALID_ARGUMENT,
  invalid_policy: grpc.status.INVALID_ARGUMENT,
  unsupported_media_type: grpc.status.INVALID_ARGUMENT,
  policy_read_only: grpc.status.FAILED_PRECONDITION,
  dns_read_only: grpc.status.FAILED_PRECONDITION,
  precondition_failed: grpc.status.FAILED_PRECONDITION,
  not_implemented: grpc.status.UNIMPLEMENTED,
  unauthorized: grpc.status.UNAUTHENTICATED,
  forbidden: grpc.status.PERMISSION_DENIED,
  csrf_failed: grpc.status.PERMISSION_DENIED,
  not_found: grpc.status.NOT_FOUND,
  route_not_found: grpc.status.UNIMPLEMENTED,
  method_not_allowed: grpc.status.UNIMPLEMENTED,
  conflict: grpc.status.FAILED_PRECONDITION,
  name_taken: grpc.status.ALREADY_EXISTS,
  user_has_nodes: grpc.status.FAILED_PRECONDITION,
  key_used: grpc.status.FAILED_PRECONDITION,
  payload_too_large: grpc.status.RESOURCE_EXHAUSTED,
  rate_limited: grpc.status.RESOURCE_EXHAUSTED,
  unavailable: grpc.status.UNAVAILABLE,
  internal: grpc.status.INTERNAL,
};

/** PROTO_FIELD renames the REST field names shared errors use to the proto field names a gRPC client sent. */
const PROTO_FIELD: Record<string, string> = {
  authId: 'auth_id', disableExpiry: 'disable_expiry', aclTags: 'acl_tags', newName: 'new_name', pictureUrl: 'picture_url',
};
const renameFields = (s: string) => s.replace(/\b(authId|disableExpiry|aclTags|newName|pictureUrl)\b/g, (m) => PROTO_FIELD[m]!);

/** GrpcError is a status to answer with. */
export interface GrpcError { code: grpc.status; details: string }

/**
 * MAX_DETAILS bounds a status message: it travels in HTTP/2 trailers, and one past the client's header limit
 * (a policy with thousands of errors, say) reset the stream and destroyed the channel's connection.
 */
const MAX_DETAILS = 4096;
function capDetails(text: string): string {
  return text.length <= MAX_DETAILS ? text : `${text.slice(0, MAX_DETAILS)}... (${text.length - MAX_DETAILS} more characters)`;
}

/** grpcErrorOf turns a thrown error into a status; anything unexpected is INTERNAL and logged (never its text to the client). */
export function grpcErrorOf(err: unknown, method: string, logger: Logger): GrpcError {
  if (err instanceof HeadwayError) return { code: STATUS[err.code], details: capDetails(renameFields(err.message)) };
  logger.error('grpc call failed', { method, error: safeErrorText(err) });
  return { code: grpc.status.INTERNAL, details: 'internal error; see the server log' };
}

// ---- the service ----

/** Refused marks a request message the service will not decode (too large or malformed), answered after authentication. */
class Refused {
  constructor(readonly error: GrpcError) {}
}

/** FieldWire: per field number of a request message, its name and the wire types it may come in. */
type FieldWire = Map<number, { name: string; wire: number[] }>;
const FIELD_WIRES = new WeakMap<object, FieldWire>();
const WIRE_OF: Record<string, number> = {
  TYPE_DOUBLE: 1, TYPE_FIXED64: 1, TYPE_SFIXED64: 1, TYPE_FLOAT: 5, TYPE_FIXED32: 5, TYPE_SFIXED32: 5,
  TYPE_STRING: 2, TYPE_BYTES: 2, TYPE_MESSAGE: 2,
};

/** fieldsOf reads a method's request fields from its descriptor (proto-loader's), once. */
function fieldsOf(def: grpc.MethodDefinition<unknown, unknown>): FieldWire {
  const type = (def as unknown as { requestType: { type: { field: { name: string; number: number; label: string; type: string }[] } } }).requestType.type;
  let out = FIELD_WIRES.get(type);
  if (!out) {
    out = new Map();
    for (const f of type.field) {
      const wire = WIRE_OF[f.type] ?? 0;
      // A repeated number may come packed (one length-delimited run).
      out.set(f.number, { name: f.name, wire: f.label === 'LABEL_REPEATED' && wire !== 2 ? [wire, 2] : [wire] });
    }
    FIELD_WIRES.set(type, out);
  }
  return out;
}

/**
 * wireProblem walks a request's top-level fields and says what is wrong with them, if anything: a field number 0,
 * a group, a known field in a wire type its type never has, or a field cut short. protobufjs decodes a known field
 * sent in another wire type as if it were its own and reads on from inside it: the bytes of a length-delimited
 * `reusable` became top-level fields, and a key for no user came out reusable where the message asked for none.
 * Unknown fields are skipped, as every protobuf reader does.
 */
export function wireProblem(buf: Uint8Array, fields: FieldWire): string | undefined {
  let at = 0;
  const varint = (): number | undefined => {
    let v = 0, mul = 1;
    for (let k = 0; k < 10 && at < buf.length; k++) {
      const b = buf[at++]!;
      v += (b & 0x7f) * mul;
      mul *= 128;
      if (b < 0x80) return v;
    }
    return undefined;
  };
  while (at < buf.length) {
    const tag = varint();
    if (tag === undefined) return `a field tag is cut short at byte ${at}`;
    const num = Math.floor(tag / 8), wire = tag % 8;
    if (num === 0) return 'field number 0 is not a field';
    const known = fields.get(num);
    if (known && !known.wire.includes(wire)) return `field ${num} (${known.name}) came as wire type ${wire}, but it is of wire type ${known.wire[0]}`;
    let end: number;
    switch (wire) {
      case 0: if (varint() === undefined) return `field ${num} is cut short`; continue;
      case 1: end = at + 8; break;
      case 5: end = at + 4; break;
      case 2: { const n = varint(); if (n === undefined) return `field ${num} is cut short`; end = at + n; break; }
      default: return `field ${num} came as wire type ${wire}, which no field of this message has`;
    }
    if (end > buf.length) return `field ${num} is cut short`;
    at = end;
  }
  return undefined;
}

/** limitOf is a method's largest request message: the REST body limits (policy text 4 MiB, anything else 1 MiB). */
const limitOf = (method: string) => (method === 'SetPolicy' || method === 'CheckPolicy' ? GRPC_POLICY_LIMIT : BODY_LIMIT);

/**
 * serviceWithLimits is the service definition with each request decoder capped at
 * the method's limit, and a message that does not decode turned into
 * INVALID_ARGUMENT (grpc-js would answer INTERNAL).
 */
function serviceWithLimits(): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [name, def] of Object.entries(headscaleServiceDefinition())) {
    const limit = limitOf(name);
    out[name] = {
      ...def,
      requestDeserialize: (buf: Buffer) => {
        if (buf.length > limit) {
          return new Refused({ code: grpc.status.RESOURCE_EXHAUSTED, details: `request message of ${buf.length} bytes exceeds the ${limit}-byte limit` });
        }
        const wrong = wireProblem(buf, fieldsOf(def));
        if (wrong) return new Refused({ code: grpc.status.INVALID_ARGUMENT, details: `the request is not a valid ${name} message: ${wrong}` });
        try {
          return def.requestDeserialize(buf);
        } catch (err) {
          return new Refused({ code: grpc.status.INVALID_ARGUMENT, details: `the request is not a valid ${name} message: ${(err as Error).message}` });
        }
      },
    };
  }
  return out;
}

/** READS are the methods that change nothing: not recorded in the audit log. */
const READS = /^(Get|List|Check|Health)/;

/** BEARER is the authorization metadata headscale's clients send (the REST API's header). */
const BEARER = /^Bearer\s+(\S+)$/i;

/**
 * headscaleService binds HANDLERS to `deps`: each call is authenticated first with
 * the same API-key check as the REST API (authorization: Bearer <key>), then its
 * message is checked, then the handler runs. Metadata and keys are never logged.
 */
export function headscaleService(deps: ApiDeps, logger: Logger): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition = serviceWithLimits();
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const method of Object.keys(definition)) {
    const handler = HANDLERS[method];
    if (!handler) throw new Error(`HeadscaleService.${method} has no handler`);
    implementation[method] = (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      const started = Date.now();
      const finish = (err: GrpcError | null, answer?: Message) => {
        logger.trace('grpc request', { method, code: grpc.status[err ? err.code : grpc.status.OK], ms: Date.now() - started });
        if (err) callback({ code: err.code, details: err.details, metadata: new grpc.Metadata() });
        else callback(null, answer);
      };
      void (async () => {
        const header = call.metadata.get('authorization');
        const m = header.length === 1 && typeof header[0] === 'string' ? BEARER.exec(header[0]) : null;
        if (!m) {
          return finish({ code: grpc.status.UNAUTHENTICATED, details: header.length ? 'malformed authorization metadata; expected Bearer <API key>' : 'missing API key (authorization: Bearer <API key>)' });
        }
        const key = await deps.state.keys.authenticateApiKey(m[1]!);
        if (!key) return finish({ code: grpc.status.UNAUTHENTICATED, details: 'invalid, expired or revoked API key' });
        if (call.request instanceof Refused) return finish(call.request.error);
        const answer = await handler(call.request as Message, deps);
        if (!READS.test(method)) {
          await recordCall(deps, { actor: `apikey:${key.prefix}`, action: method, target: describeFields(call.request as Record<string, unknown>), remote: call.getPeer() });
        }
        finish(null, answer);
      })().catch((err: unknown) => finish(grpcErrorOf(err, method, logger)));
    };
  }
  return { definition, implementation };
}
