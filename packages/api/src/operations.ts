/**
 * The admin operations that hold more than one service call: the REST routes
 * (routes.ts, lifecycle.ts) and the gRPC HeadscaleService (grpc.ts) both call these, so
 * the two APIs cannot drift apart. Each takes already-parsed input (numbers, Dates,
 * string lists); parsing the wire format stays with each API. Error fields use the
 * REST names (camelCase); the gRPC layer renames them to its proto fields.
 */
import { randomBytes } from 'node:crypto';
import { badField, HeadwayError } from '@headway/core';
import type { Node, PreAuthKey, User } from '@headway/core';
import { canonicalRoutes } from '@headway/core';
import type { ApiDeps } from './route.js';
import type { PendingLogins } from './lifecycle.js';

/** AUTH_ID is what a login URL ends with. */
const AUTH_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * checkAuthId reads a required auth ID (the last part of the device's AuthURL); `field`
 * names the request field that carried it in the error.
 */
export function checkAuthId(raw: string | undefined, field: string): string {
  const id = raw?.trim();
  if (!id) throw badField(field, 'is required (the ID at the end of the login URL the device printed)');
  if (!AUTH_ID.test(id)) throw badField(field, `expected the ID from the login URL (letters, digits, - and _), found ${JSON.stringify(id.slice(0, 80))}`);
  return id;
}

/** logins is the registrar, or 503 on an API built without one (tests that build the API alone). */
export function logins(deps: ApiDeps): PendingLogins {
  if (!deps.logins) throw new HeadwayError('unavailable', 'interactive registration is not available');
  return deps.logins;
}

/** listNodes lists every node, or those of one user (a name or id; unknown is a 404). */
export function listNodes(deps: ApiDeps, userRef?: string): Node[] {
  const user = userRef ? deps.state.users.resolve(userRef) : undefined;
  return deps.state.nodes.list({ userId: user?.id });
}

/** setNodeTags replaces a node's tags; each must be defined in the policy's tagOwners when a policy is in force. */
export async function setNodeTags(deps: ApiDeps, id: number, tags: string[]): Promise<Node> {
  await deps.policy.checkTagsAllowed(tags);
  return deps.state.nodes.setTags(id, tags);
}

/** approveNodeRoutes replaces a node's approved routes through RouteService (auto-approvals and the primary election in one commit). */
export function approveNodeRoutes(deps: ApiDeps, id: number, routes: string[]): Promise<Node> {
  return (deps.approveRoutes ?? deps.state.nodes.approveRoutes.bind(deps.state.nodes))(id, routes);
}

/**
 * setNodeExpiry sets a node's key expiry as headscale's ExpireNode does: neither
 * option expires it now; `at` sets that time; `disable` clears it (never expires).
 * Both at once is refused.
 */
export function setNodeExpiry(deps: ApiDeps, id: number, opts: { at?: Date; disable: boolean }): Promise<Node> {
  if (opts.disable && opts.at) throw badField('expiry', 'cannot be combined with disableExpiry');
  return deps.state.nodes.expire(id, opts.disable ? null : (opts.at ?? new Date()));
}

/**
 * registerPendingNode registers the device waiting behind an interactive login for a
 * user (headscale's `nodes register` and `auth register`); the user is resolved first,
 * so an unknown user changes nothing.
 */
export async function registerPendingNode(deps: ApiDeps, input: { user: string; authId: string; userField?: string; authIdField: string }): Promise<Node> {
  const ref = input.user.trim();
  if (!ref) throw badField(input.userField ?? 'user', 'is required (a user name or id)');
  const user = deps.state.users.resolve(ref, input.userField ?? 'user');
  const key = checkAuthId(input.authId, input.authIdField);
  if (deps.sshChecks?.owns(key)) throw badField(input.authIdField, 'is the ID of an SSH check, not of a device login: approve it with auth approve');
  return deps.state.nodes.require(await logins(deps).approve(key, user.id, { field: input.authIdField }));
}

/** approvePendingNode logs a known device in again with the owner it has (`auth approve`); an SSH check's ID lets its connection in (null: no node). */
export async function approvePendingNode(deps: ApiDeps, authId: string, field: string): Promise<Node | null> {
  const key = checkAuthId(authId, field);
  if (deps.sshChecks?.owns(key)) { deps.sshChecks.approve(key); return null; }
  return deps.state.nodes.require(await logins(deps).approve(key, undefined, { field }));
}

/** rejectPendingNode refuses a waiting login or a held SSH connection (`auth reject`); the device is told. */
export async function rejectPendingNode(deps: ApiDeps, authId: string, field: string): Promise<void> {
  const key = checkAuthId(authId, field);
  if (deps.sshChecks?.owns(key)) { deps.sshChecks.reject(key); return; }
  await logins(deps).reject(key, field);
}

/** createDebugNode stores a node record with fresh random keys (tests and demos; it never connects). */
export async function createDebugNode(deps: ApiDeps, input: { user: string; name: string; machineKey?: string; routes: string[] }): Promise<Node> {
  const user = deps.state.users.resolve(input.user);
  if (!input.name.trim()) throw badField('name', 'must not be empty');
  return deps.state.nodes.create({
    machineKey: input.machineKey ?? `mkey:${randomBytes(32).toString('hex')}`,
    nodeKey: `nodekey:${randomBytes(32).toString('hex')}`,
    discoKey: `discokey:${randomBytes(32).toString('hex')}`,
    hostname: input.name, userId: user.id, registerMethod: 'debug',
    availableRoutes: canonicalRoutes(input.routes),
  });
}

/** backfillNodeIps gives every node an address of each enabled family and says, one line per node, what it got. */
export async function backfillNodeIps(deps: ApiDeps): Promise<string[]> {
  return (await deps.state.nodes.backfillIPs()).map((n) => `node ${n.givenName}: ${[n.ipv4, n.ipv6].filter(Boolean).join(', ')}`);
}

/** createPreAuthKey issues a key; its tags must be defined in the policy's tagOwners when a policy is in force. */
export async function createPreAuthKey(deps: ApiDeps, input: { user: User | null; reusable?: boolean; ephemeral?: boolean; expiration: Date | null; tags: string[]; description?: string }): Promise<{ key: PreAuthKey; secret: string }> {
  if (input.tags.length) await deps.policy.checkTagsAllowed(input.tags);
  return deps.state.keys.createPreAuthKey({
    userId: input.user ? input.user.id : null, reusable: input.reusable, ephemeral: input.ephemeral,
    expiration: input.expiration, tags: input.tags, description: input.description,
  });
}

/** apiKeyRef names an API key by id or by prefix (one is required; the id wins when both are given). */
export function apiKeyRef(ref: { id?: number; prefix?: string }): { id: number } | { prefix: string } {
  if (ref.id !== undefined) return { id: ref.id };
  if (!ref.prefix) throw badField('prefix', 'is required (or id)');
  return { prefix: ref.prefix };
}
