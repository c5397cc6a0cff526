/**
 * headscale CLI parity endpoints and handlers (issue 16): pending interactive logins
 * (`/api/v1/auth/register|approve|reject`, headscale's paths and bodies), node expiry
 * set or disabled, user pictures, and the explicit cascade of a user delete. They are
 * kept here, in their own functions, so the route table in routes.ts only points at them.
 */
import type { Context } from 'koa';
import { badField, HeadwayError } from '../errors.js';
import type { Route } from './routes.js';
import { readJson } from './http.js';
import { nodeView, userView } from './views.js';
import type { ApiDeps } from './routes.js';

/**
 * PendingLogins is what the API needs of the registrar: approve a waiting interactive
 * login (for a user, or for the owner the known machine already has) or reject it.
 * `field` names the request field that carried the auth ID in error answers.
 */
export interface PendingLogins {
  approve(key: string, userId?: number, field?: string): Promise<number>;
  reject(key: string, field?: string): Promise<void>;
}

const AUTH_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** text reads an optional string field; anything else is a 400 naming it. */
function text(body: Record<string, unknown>, field: string): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
  if (typeof v !== 'string') throw badField(field, `expected a string, found ${typeof v}`);
  return v;
}

/** authId reads the required auth ID (the last part of the device's AuthURL). */
function authId(body: Record<string, unknown>): string {
  const id = text(body, 'authId')?.trim();
  if (!id) throw badField('authId', 'is required (the ID at the end of the login URL the device printed)');
  if (!AUTH_ID.test(id)) throw badField('authId', `expected the ID from the login URL (letters, digits, - and _), found ${JSON.stringify(id.slice(0, 80))}`);
  return id;
}

function logins(deps: ApiDeps): PendingLogins {
  if (!deps.logins) throw new HeadwayError('unavailable', 'interactive registration is not available');
  return deps.logins;
}

const view = (deps: ApiDeps, id: number) => nodeView(deps.state.requireNode(id), deps.state, deps.primaryRoutes && ((x) => deps.primaryRoutes!(x.id)));

/** authRegister registers the device behind a pending login to a user (`headway auth register`). */
export async function authRegister(ctx: Context, deps: ApiDeps): Promise<unknown> {
  const b = await readJson(ctx);
  const id = authId(b);
  const ref = text(b, 'user')?.trim();
  if (!ref) throw badField('user', 'is required (a user name or id)');
  const user = deps.state.resolveUser(ref);
  return { node: view(deps, await logins(deps).approve(id, user.id, 'authId')) };
}

/** authApprove approves a pending login of a machine Headway already knows; it keeps its owner (`headway auth approve`). */
export async function authApprove(ctx: Context, deps: ApiDeps): Promise<unknown> {
  const b = await readJson(ctx);
  return { node: view(deps, await logins(deps).approve(authId(b), undefined, 'authId')) };
}

/** authReject refuses a pending login; the waiting device is told so (`headway auth reject`). */
export async function authReject(ctx: Context, deps: ApiDeps): Promise<unknown> {
  const b = await readJson(ctx);
  await logins(deps).reject(authId(b), 'authId');
  return {};
}

/** AUTH_ROUTES are headscale 0.29's /api/v1/auth endpoints. */
export const AUTH_ROUTES: Route[] = [
  {
    method: 'POST', path: '/api/v1/auth/register', summary: 'Register the device behind a pending login (AuthURL) to a user', body: { authId: 'string (required): the ID at the end of the AuthURL', user: 'string (required): user name or id' }, response: '{node: Node}',
    handler: authRegister,
  },
  {
    method: 'POST', path: '/api/v1/auth/approve', summary: 'Approve a pending login of a known device (re-login); it keeps its owner. A new device needs /auth/register (409)', body: { authId: 'string (required)' }, response: '{node: Node}',
    handler: authApprove,
  },
  {
    method: 'POST', path: '/api/v1/auth/reject', summary: 'Reject a pending login; the device is told its login was rejected', body: { authId: 'string (required)' }, response: '{}',
    handler: authReject,
  },
];

/** queryOrBody reads a field from the query string (headscale's gateway) or else the JSON body. */
async function queryOrBody(ctx: Context): Promise<Record<string, unknown>> {
  const b = await readJson(ctx);
  for (const [k, v] of Object.entries(ctx.query)) {
    const key = k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    if (b[key] === undefined && typeof v === 'string') b[key] = v;
  }
  return b;
}

/**
 * expireNode sets a node's key expiry as headscale's ExpireNode does: no parameter
 * expires it now; `expiry` (RFC 3339) sets that time (past or future); `disableExpiry`
 * clears it (the node never expires). Both at once is a 400.
 */
export async function expireNode(ctx: Context, deps: ApiDeps, id: number): Promise<unknown> {
  const b = await queryOrBody(ctx);
  const disableRaw = b.disableExpiry;
  let disable = false;
  if (disableRaw !== undefined && disableRaw !== null && disableRaw !== '') {
    if (disableRaw === true || disableRaw === 'true') disable = true;
    else if (disableRaw === false || disableRaw === 'false') disable = false;
    else throw badField('disableExpiry', `expected true or false, found ${JSON.stringify(disableRaw)}`);
  }
  const raw = text(b, 'expiry')?.trim();
  if (disable && raw) throw badField('expiry', 'cannot be combined with disableExpiry');
  let at: Date | null = new Date();
  if (disable) at = null;
  else if (raw) {
    if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i.test(raw) || Number.isNaN(Date.parse(raw))) {
      throw badField('expiry', `expected an RFC 3339 time such as 2030-01-31T10:00:00Z, found ${JSON.stringify(raw.slice(0, 80))}`);
    }
    at = new Date(raw);
  }
  const node = await deps.state.expireNode(id, at);
  return { node: nodeView(node, deps.state, deps.primaryRoutes && ((x) => deps.primaryRoutes!(x.id))) };
}

/** createUser creates a user with headscale's optional display name, e-mail and picture URL. */
export async function createUser(ctx: Context, deps: ApiDeps): Promise<unknown> {
  const b = await readJson(ctx);
  const name = text(b, 'name');
  if (name === undefined) throw badField('name', 'is required');
  // headscale's request field is pictureUrl; its User answer calls the same value profilePicUrl.
  const picture = text(b, 'pictureUrl') ?? text(b, 'profilePicUrl') ?? '';
  const user = await deps.state.createUser({ name, displayName: text(b, 'displayName') ?? '', email: text(b, 'email') ?? '', profilePicUrl: picture });
  return { user: userView(user) };
}

/**
 * deleteUser refuses a user who owns nodes (headscale); `deleteNodes=true` is the
 * explicit cascade: nodes, keys and user in one transaction. The answer lists the
 * nodes that went.
 */
export async function deleteUser(ctx: Context, deps: ApiDeps, id: number): Promise<unknown> {
  const raw = ctx.query.deleteNodes ?? ctx.query.delete_nodes;
  let deleteNodes = false;
  if (raw !== undefined) {
    if (raw === 'true') deleteNodes = true;
    else if (raw !== 'false') throw badField('deleteNodes', `expected true or false, found ${JSON.stringify(raw)}`);
  }
  const { nodes } = await deps.state.deleteUser(id, { deleteNodes });
  return deleteNodes ? { deletedNodes: nodes.map((n) => ({ id: String(n.id), givenName: n.givenName })) } : {};
}
