import { z } from 'zod';
import { HeadwayError, shown } from '@headway/core';
import type { DriveDestination, DriveGrantRecord, DriveSource } from '@headway/core';
import type { State } from '@headway/core';
import type { DriveService } from '@headway/core';
import { route, type ApiDeps, type Route } from './route.js';
import { Empty, numericId } from './schemas.js';

/** DriveEndView is one end of a grant as the API shows it: kind, id (users, nodes) and current name. */
export interface DriveEndView { kind: DriveSource['kind']; id?: string; name: string }

/** DriveGrantView is the API shape of a stored Taildrive grant. */
export interface DriveGrantView {
  id: string;
  src: DriveEndView;
  dst: DriveEndView;
  shares: string[];
  access: 'ro' | 'rw';
  createdAt: string;
}

function endView(end: DriveSource | DriveDestination, state: State): DriveEndView {
  switch (end.kind) {
    case 'user': return { kind: 'user', id: String(end.id), name: state.users.get(end.id)?.name ?? '(deleted user)' };
    case 'node': return { kind: 'node', id: String(end.id), name: state.nodes.get(end.id)?.givenName ?? '(deleted node)' };
    default: return { kind: end.kind, name: end.name };
  }
}

export function driveGrantView(g: DriveGrantRecord, state: State): DriveGrantView {
  return {
    id: String(g.id), src: endView(g.src, state), dst: endView(g.dst, state),
    shares: g.shares, access: g.access, createdAt: g.createdAt.toISOString(),
  };
}

function service(deps: ApiDeps): DriveService {
  if (!deps.drive) throw new HeadwayError('conflict', 'Taildrive grants are not available on this server');
  return deps.drive;
}

const kind = (v: unknown) => (Array.isArray(v) ? 'a list' : typeof v);
/** selector is a required grant end: a missing or empty one says what may go there. */
const selector = (hint: string, example: string) => z.string({
  error: (iss) => (iss.input === undefined || iss.input === null ? `is required: ${hint}` : `expected a string, found ${kind(iss.input)}`),
}).min(1, { error: `is required: ${hint}` }).meta({ description: hint, examples: [example] });

/**
 * GrantBody is a POST body: `src` and `dst` are selector strings, `shares` a list of
 * share names (default ["*"]), `access` ro or rw (default ro, the least); an unknown
 * field is refused rather than ignored (a misspelt `acess` would otherwise grant ro).
 */
const GrantBody = z.strictObject({
  src: selector('user:NAME, group:NAME, tag:NAME or node:NAME', 'user:alice'),
  dst: selector('node:NAME or tag:NAME', 'node:nas'),
  shares: z.array(z.string(), { error: 'expected a list of share names' })
    .min(1, { error: 'must name at least one share (or "*" for all)' }).nullish()
    .meta({ description: 'Share names, or "*" for all (default ["*"])', examples: [['docs']] }),
  access: z.enum(['ro', 'rw'], { error: (iss) => `expected "ro" or "rw", found ${shown(iss.input)}` }).nullish()
    .meta({ description: 'ro (default) or rw', examples: ['ro'] }),
});

const End = z.object({
  kind: z.enum(['user', 'group', 'tag', 'node']),
  id: z.string().optional().meta({ description: 'User or node id' }),
  name: z.string().meta({ description: 'Current name of the user, node, group or tag' }),
});
const DriveGrantSchema = z.object({
  id: z.string(), src: End, dst: End, shares: z.array(z.string()), access: z.enum(['ro', 'rw']), createdAt: z.string(),
}).meta({ id: 'DriveGrant', description: 'A Taildrive grant kept by the database drive adapter' });

/** DRIVE_ROUTES manage the database drive adapter's Taildrive grants; ROUTES lists them, so they share its API-key check. */
export const DRIVE_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v1/drive', operationId: 'listDriveGrants', tag: 'Drive', summary: 'List stored Taildrive grants',
    description: 'Grants kept by the database drive adapter (`@headway/drive-db` in `plugins:`); 409 when no adapter stores grants.',
    response: z.object({ grants: z.array(DriveGrantSchema) }), responseDescription: 'The grants',
    errors: [409],
    handle: async (_input, deps) => ({ grants: (await service(deps).list()).map((g) => driveGrantView(g, deps.state)) }),
  }),
  route({
    method: 'POST', path: '/api/v1/drive', operationId: 'grantDrive', tag: 'Drive', summary: 'Grant Taildrive access',
    description: 'The destination may share, the source may access; pushed to devices at once. Unknown users, nodes, groups or tags are 404.',
    body: GrantBody,
    response: z.object({ grant: DriveGrantSchema }), responseDescription: 'The new grant',
    errors: [404, 409],
    handle: async ({ body }, deps) => ({
      grant: driveGrantView(await service(deps).grant({ src: body.src, dst: body.dst, shares: body.shares ?? ['*'], access: body.access ?? 'ro' }), deps.state),
    }),
  }),
  route({
    method: 'DELETE', path: '/api/v1/drive/:id', operationId: 'revokeDrive', tag: 'Drive', summary: 'Revoke a Taildrive grant',
    description: 'Pushed to devices at once.',
    params: z.object({ id: numericId('Grant id') }),
    response: Empty, responseDescription: 'Revoked',
    errors: [404, 409],
    handle: async ({ params }, deps) => { await service(deps).revoke(params.id); return {}; },
  }),
];
