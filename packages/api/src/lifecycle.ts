/**
 * The lifecycle routes of nodes and users, with headscale's paths and bodies: pending
 * interactive logins (`/api/v1/auth/register|approve|reject`), node expiry set or
 * disabled, user creation with its picture, and the explicit cascade of a user delete.
 * Each is a typed route() entry; routes.ts places them in the route table.
 */
import { z } from 'zod';
import { badField, shown } from '@headway/core';
import { apiNode, route, type ApiDeps, type Route } from './route.js';
import { Empty, idText, NodeAnswer, numericId, optional, UserSchema } from './schemas.js';
import { rfc3339Time } from '@headway/core';
import { userView } from './views.js';
import { approvePendingNode, checkAuthId, registerPendingNode, rejectPendingNode, setNodeExpiry } from './operations.js';

/**
 * PendingLogins is what the API needs of the registrar: approve a waiting interactive
 * login (for a user, or for the owner the known machine already has) or reject it.
 * `field` names the request field that carried the auth ID in error answers.
 */
export interface PendingLogins {
  approve(key: string, userId?: number, how?: { field?: string }): Promise<number>;
  reject(key: string, field?: string): Promise<void>;
}

/**
 * SshCheckApprovals is what the API needs of SSH `check` mode: tell a check's auth ID from a login's, and
 * approve or reject the held connection (headscale's `auth approve|reject` do both).
 */
export interface SshCheckApprovals {
  owns(id: string): boolean;
  approve(id: string): unknown;
  reject(id: string): unknown;
}

/** authIdFields is headscale's auth-id body (its proto name auth_id arrives as authId: readJson camel-cases bodies). */
const authIdFields = {
  authId: optional(idText()).meta({ description: 'The ID at the end of the login URL the device printed', examples: ['hwreg-0123456789abcdef'] }),
};

/** queryFlag is a true/false query parameter (headscale's gateway spelling); empty reads as false. */
const queryFlag = (description: string) =>
  z.enum(['true', 'false', '']).optional().transform((v) => v === 'true').meta({ description, examples: ['true'] });

/** AUTH_ROUTES are headscale 0.29's /api/v1/auth endpoints. */
export const AUTH_ROUTES: Route[] = [
  route({
    method: 'POST', path: '/api/v1/auth/register', operationId: 'authRegister', tag: 'Nodes', summary: 'Register the device behind a pending login',
    description: 'Registers the device waiting at the AuthURL that `tailscale up` printed, for a user (`headway auth register`).',
    body: z.object({ ...authIdFields, user: idText().meta({ description: 'User name or id', examples: ['alice'] }) }),
    response: NodeAnswer, responseDescription: 'The registered node',
    errors: [404, 409, 503],
    handle: async ({ body }, deps) => {
      checkAuthId(body.authId, 'authId');
      return { node: apiNode(deps, await registerPendingNode(deps, { user: body.user, authId: body.authId!, authIdField: 'authId' })) };
    },
  }),
  route({
    method: 'POST', path: '/api/v1/auth/approve', operationId: 'authApprove', tag: 'Nodes', summary: 'Approve a pending login of a known device, or a held SSH connection',
    description: 'A device already in the network logging in again (e.g. after its key expired) keeps its owner. A new device needs /auth/register (409). '
      + 'The auth ID of an SSH check (the link an SSH `check` rule printed) lets the held SSH connection in; the answer then has no node.',
    body: z.object(authIdFields),
    response: z.object({ node: NodeAnswer.shape.node.optional() }), responseDescription: 'The node, logged in again (none for an SSH check)',
    errors: [404, 409, 503],
    handle: async ({ body }, deps) => {
      const node = await approvePendingNode(deps, body.authId ?? '', 'authId');
      return node ? { node: apiNode(deps, node) } : {};
    },
  }),
  route({
    method: 'POST', path: '/api/v1/auth/reject', operationId: 'authReject', tag: 'Nodes', summary: 'Reject a pending login or a held SSH connection',
    description: 'The waiting `tailscale up` ends with "login rejected by the administrator"; a held SSH connection (an SSH check\'s auth ID) is refused.',
    body: z.object(authIdFields),
    response: Empty, responseDescription: 'Rejected',
    errors: [404, 503],
    handle: async ({ body }, deps) => { await rejectPendingNode(deps, body.authId ?? '', 'authId'); return {}; },
  }),
];

const expiryText = () => optional(z.string()).meta({ description: 'Set the key expiry to this RFC 3339 time (past or future)', examples: ['2030-01-31T10:00:00Z'] });

/**
 * EXPIRE_NODE sets a node's key expiry as headscale's ExpireNode does: no parameter
 * expires it now; `expiry` (RFC 3339) sets that time; `disableExpiry` clears it (the
 * node never expires). Both at once is a 400. headscale's gateway sends them in the
 * query string; a JSON body is read too. Since no parameter expires the node at once,
 * one it does not know (`expires`, a typo) and a bare `disableExpiry` are refused
 * rather than read as no parameter.
 */
export const EXPIRE_NODE = route({
  method: 'POST', path: '/api/v1/node/:id/expire', operationId: 'expireNode', tag: 'Nodes', summary: 'Expire a node key, set its expiry or disable it',
  description: 'No parameter expires the key now (the device must log in again); `expiry` sets when it expires; `disableExpiry=true` makes it never expire.',
  params: z.object({ id: numericId('Node id') }),
  query: z.strictObject({
    expiry: expiryText(),
    disableExpiry: z.enum(['true', 'false'], { error: (iss) => `expected true or false, found ${shown(iss.input)}` }).optional()
      .transform((v) => v === 'true').meta({ description: 'true: the node never expires', examples: ['true'] }),
  }),
  body: z.strictObject({
    expiry: expiryText(),
    disableExpiry: optional(z.boolean()).meta({ description: 'true: the node never expires', examples: [true] }),
  }),
  response: NodeAnswer, responseDescription: 'The node with its new expiry',
  errors: [404],
  handle: async ({ params, query, body }, deps) => {
    const disable = query.disableExpiry || (body.disableExpiry ?? false);
    const raw = (query.expiry ?? body.expiry)?.trim();
    const at = raw ? rfc3339Time(raw) : undefined;
    if (raw && !at) {
      throw badField('expiry', `expected an RFC 3339 time such as 2030-01-31T10:00:00Z, found ${JSON.stringify(raw.slice(0, 80))}`);
    }
    return { node: apiNode(deps, await setNodeExpiry(deps, params.id, { at, disable })) };
  },
});

/** CREATE_USER creates a user with headscale's optional display name, e-mail and picture URL. */
export const CREATE_USER = route({
  method: 'POST', path: '/api/v1/user', operationId: 'createUser', tag: 'Users', summary: 'Create a user',
  description: 'Names are unique without regard to case (409 name_taken).',
  body: z.object({
    name: z.string().meta({ description: "1-63 letters, digits, '.', '_', '-', '+' or '@', starting with a letter or digit", examples: ['alice'] }),
    displayName: optional(z.string()).meta({ description: 'Display name', examples: ['Alice Liddell'] }),
    email: optional(z.string()).meta({ description: 'E-mail address', examples: ['alice@example.com'] }),
    pictureUrl: optional(z.string()).meta({ description: 'Profile picture (an http or https URL)', examples: ['https://example.com/alice.png'] }),
    profilePicUrl: optional(z.string()).meta({ description: 'Same as pictureUrl (the name headscale\'s User answer uses)', examples: ['https://example.com/alice.png'] }),
  }),
  response: z.object({ user: UserSchema }), responseDescription: 'The new user',
  errors: [409],
  handle: async ({ body }, { state }) => ({
    user: userView(await state.users.create({ name: body.name, displayName: body.displayName ?? '', email: body.email ?? '', profilePicUrl: body.pictureUrl ?? body.profilePicUrl ?? '' })),
  }),
});

/**
 * DELETE_USER refuses a user who owns nodes (headscale); `deleteNodes=true` is the
 * explicit cascade: nodes, keys and user in one transaction. The answer lists the
 * nodes that went.
 */
export const DELETE_USER = route({
  method: 'DELETE', path: '/api/v1/user/:id', operationId: 'deleteUser', tag: 'Users', summary: 'Delete a user',
  description: "Deletes the user and its pre-auth keys. Refused (409 user_has_nodes) while the user owns nodes, as in headscale; `deleteNodes=true` deletes the user's nodes too, in one transaction.",
  params: z.object({ id: numericId('User id') }),
  query: z.object({ deleteNodes: queryFlag("true: delete the user's nodes too (they are logged out)") }),
  response: z.object({
    deletedNodes: z.array(z.object({ id: z.string(), givenName: z.string() })).optional().meta({ description: 'With deleteNodes: the nodes that were deleted' }),
  }), responseDescription: 'Deleted',
  errors: [404, 409],
  handle: async ({ params, query }, { state }) => {
    const deleteNodes = query.deleteNodes;
    const { nodes } = await state.users.delete(params.id, { deleteNodes });
    return deleteNodes ? { deletedNodes: nodes.map((n) => ({ id: String(n.id), givenName: n.givenName })) } : {};
  },
});
