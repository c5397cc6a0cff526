import { z } from 'zod';
import type { Context } from 'koa';
import type { Node } from '@headway/core';
import { badField, HeadwayError, ownerIdentity } from '@headway/core';
import * as ops from '../operations.js';
import { route, type ApiDeps, type ErrorStatus, type Route } from '../route.js';
import { Empty } from '../schemas.js';
import { checkAssignableTags, principalOf } from './auth.js';
import { checkTailnet, Tailnet, tailnetName } from './tailnet.js';
import { clientConnectivity, ConnectivitySchema, DistroSchema, distroOf, hostinfoOf } from './hostinfo.js';

/*
 * Devices as Tailscale's API shows them, over the same node store, operations and
 * route service as /api/v1. A device's `id` and `nodeId` are both the node's id as a
 * decimal string: the id /api/v1 and the CLI use, and the StableID the device itself
 * is told in its map (`tailscale status --json`).
 */

/** ZERO_TIME is what Tailscale's API answers for a time that is not set (a key that never expires). */
export const ZERO_TIME = '0001-01-01T00:00:00Z';

const Routes = z.array(z.string()).meta({ description: 'CIDR prefixes', examples: [['10.0.0.0/24']] });

const Device = z.object({
  id: z.string().meta({ description: 'The node id (decimal), as /api/v1 and the CLI name it', examples: ['1'] }),
  nodeId: z.string().meta({ description: 'The same id: the StableID the device is told in its map', examples: ['1'] }),
  addresses: z.array(z.string()).meta({ examples: [['100.64.0.1', 'fd7a:115c:a1e0::1']] }),
  name: z.string().meta({ description: 'MagicDNS name: given name and dns.base_domain', examples: ['laptop.headway.net'] }),
  hostname: z.string().meta({ description: 'The hostname the device reports' }),
  user: z.string().meta({ description: "The owner's login name; tagged-devices for a device owned by its tags", examples: ['alice'] }),
  tags: z.array(z.string()),
  authorized: z.boolean().meta({ description: 'Always true: Headway has no device approval' }),
  keyExpiryDisabled: z.boolean(),
  expires: z.string().meta({ description: `RFC 3339 key expiry; ${ZERO_TIME} when it never expires` }),
  created: z.string(),
  lastSeen: z.string().nullable().meta({ description: 'When it was last connected; null while connected or if never' }),
  connectedToControl: z.boolean(),
  os: z.string(),
  clientVersion: z.string(),
  blocksIncomingConnections: z.boolean().meta({ description: 'The device runs with --shields-up' }),
  isEphemeral: z.boolean(),
  isExternal: z.boolean().meta({ description: 'Always false: Headway has no device sharing' }),
  machineKey: z.string(),
  nodeKey: z.string(),
  tailnetLockKey: z.string().meta({ description: 'Always empty: Headway has no tailnet lock' }),
  tailnetLockError: z.string(),
  updateAvailable: z.boolean().meta({ description: 'Always false: Headway does not track client releases' }),
  advertisedRoutes: Routes.optional().meta({ description: 'fields=all: routes the device advertises' }),
  enabledRoutes: Routes.optional().meta({ description: 'fields=all: routes approved for it (advertised or not)' }),
  sshEnabled: z.boolean().optional().meta({ description: 'fields=all: the device runs Tailscale SSH' }),
  clientConnectivity: ConnectivitySchema.nullable().optional(),
  distro: DistroSchema.nullable().optional(),
}).meta({ id: 'V2Device', description: "A device as Tailscale's API shows it" });
type DeviceView = z.input<typeof Device>;

const DeviceRoutes = z.object({ advertisedRoutes: Routes, enabledRoutes: Routes }).meta({ id: 'V2DeviceRoutes' });

/** deviceView is a node in Tailscale's shape; `all` adds routes, SSH, connectivity and distribution. */
export function deviceView(deps: ApiDeps, n: Node, all: boolean): DeviceView {
  const h = hostinfoOf(n);
  const base = tailnetName(deps);
  const connected = deps.state.presence.isOnline(n.id);
  const owner = ownerIdentity(n, n.userId !== null ? deps.state.users.get(n.userId) : undefined);
  const view: DeviceView = {
    id: String(n.id), nodeId: String(n.id),
    addresses: [n.ipv4, n.ipv6].filter((x): x is string => Boolean(x)),
    name: base === '-' ? n.givenName : `${n.givenName}.${base}`,
    hostname: n.hostname, user: owner.loginName, tags: n.tags,
    authorized: true, keyExpiryDisabled: n.expiry === null,
    expires: n.expiry ? n.expiry.toISOString() : ZERO_TIME, created: n.createdAt.toISOString(),
    lastSeen: connected || !n.lastSeen ? null : n.lastSeen.toISOString(), connectedToControl: connected,
    os: h.OS ?? '', clientVersion: h.IPNVersion ?? '', blocksIncomingConnections: h.ShieldsUp === true,
    isEphemeral: n.ephemeral, isExternal: false, machineKey: n.machineKey, nodeKey: n.nodeKey,
    tailnetLockKey: '', tailnetLockError: '', updateAvailable: false,
  };
  if (!all) return view;
  return {
    ...view, advertisedRoutes: n.availableRoutes, enabledRoutes: n.approvedRoutes,
    sshEnabled: (h.SSH_HostKeys?.length ?? 0) > 0, clientConnectivity: clientConnectivity(n), distro: distroOf(n),
  };
}

/** device resolves a path's device id (the node's decimal id); anything else is a 404. */
function device(deps: ApiDeps, id: string): Node {
  const n = /^\d{1,15}$/.test(id) ? deps.state.nodes.get(Number(id)) : undefined;
  if (!n) throw new HeadwayError('not_found', `device ${JSON.stringify(id.slice(0, 80))} not found`);
  return n;
}

/** FILTERS are the device attributes a list may be filtered by: a device matches when its value is one of those given. */
const FILTERS = ['os', 'user', 'hostname', 'name', 'tags', 'isEphemeral', 'connectedToControl', 'keyExpiryDisabled', 'clientVersion'] as const;
const filterValues = z.union([z.string(), z.array(z.string())]).optional();

function matches(d: DeviceView, key: (typeof FILTERS)[number], wanted: string[]): boolean {
  const v = d[key];
  return Array.isArray(v) ? v.some((x) => wanted.includes(x)) : wanted.includes(String(v));
}

/** deviceName reads a new name: a DNS label, or the full MagicDNS name ending in dns.base_domain. */
function deviceName(deps: ApiDeps, raw: string): string {
  const name = raw.trim().replace(/\.$/, '').toLowerCase();
  if (!name) throw badField('name', 'is required');
  const base = tailnetName(deps);
  const label = base !== '-' && name.endsWith(`.${base}`) ? name.slice(0, -base.length - 1) : name;
  if (label.includes('.')) throw badField('name', `expected a DNS label or a name ending in .${base}, found ${JSON.stringify(name.slice(0, 80))}`);
  return label;
}

/**
 * deviceWrite is a `POST /api/v2/device/:id/<what>` call: it resolves the device, acts
 * on it and answers {} as Tailscale does (its clients read nothing back).
 */
function deviceWrite<B extends z.ZodObject>(spec: {
  what: string; operationId: string; summary: string; description: string; body: B; errors?: ErrorStatus[];
  act: (n: Node, body: z.output<B>, deps: ApiDeps, ctx: Context) => Promise<unknown>;
}): Route {
  return route({
    method: 'POST', path: `/api/v2/device/:id/${spec.what}`, operationId: spec.operationId, tag: 'v2:Devices', summary: spec.summary,
    description: spec.description, params: DeviceParams, body: spec.body,
    response: Empty, responseDescription: 'Done',
    errors: [403, 404, ...(spec.errors ?? [])], scope: core(true),
    handle: async ({ params, body }, deps, ctx) => { await spec.act(device(deps, params.id), body as z.output<B>, deps, ctx); return {}; },
  });
}

const DeviceParams = z.object({ id: z.string().meta({ description: 'The device id (id or nodeId)', examples: ['1'] }) });
const Fields = z.object({ fields: z.enum(['default', 'all']).optional().meta({ description: 'all: add advertisedRoutes, enabledRoutes, sshEnabled, clientConnectivity and distro' }) });
const core = (write: boolean) => ({ resource: 'devices:core' as const, write });

export const DEVICE_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/devices', operationId: 'v2ListDevices', tag: 'v2:Devices', summary: 'List devices',
    description: `Every device of the tailnet. Filters (${FILTERS.join(', ')}), each repeatable: a device is listed when its value (for tags: one of them) is one of those given.`,
    params: z.object({ tailnet: Tailnet }),
    query: Fields.extend(Object.fromEntries(FILTERS.map((f) => [f, filterValues])) as Record<(typeof FILTERS)[number], typeof filterValues>).strict(),
    response: z.object({ devices: z.array(Device) }), responseDescription: 'The devices',
    errors: [403, 404], scope: core(false),
    handle: async ({ params, query }, deps) => {
      checkTailnet(deps, params.tailnet);
      let devices = deps.state.nodes.list().map((n) => deviceView(deps, n, query.fields === 'all'));
      for (const key of FILTERS) {
        const v = query[key];
        if (v !== undefined) devices = devices.filter((d) => matches(d, key, Array.isArray(v) ? v : [v]));
      }
      return { devices };
    },
  }),
  route({
    method: 'GET', path: '/api/v2/device/:id', operationId: 'v2GetDevice', tag: 'v2:Devices', summary: 'Get a device',
    description: 'One device by id.',
    params: DeviceParams, query: Fields,
    response: Device, responseDescription: 'The device',
    errors: [403, 404], scope: core(false),
    handle: async ({ params, query }, deps) => deviceView(deps, device(deps, params.id), query.fields === 'all'),
  }),
  route({
    method: 'DELETE', path: '/api/v2/device/:id', operationId: 'v2DeleteDevice', tag: 'v2:Devices', summary: 'Delete a device',
    description: 'Removes the device: it is logged out and its peers lose it at once.',
    params: DeviceParams,
    response: Empty, responseDescription: 'Deleted',
    errors: [403, 404], scope: core(true),
    handle: async ({ params }, deps) => { await deps.state.nodes.delete(device(deps, params.id).id); return {}; },
  }),
  deviceWrite({
    what: 'authorized', operationId: 'v2AuthorizeDevice', summary: 'Authorize a device',
    description: 'Headway has no device approval: every device is authorized, so `true` changes nothing and `false` is refused (expire its key or delete it instead).',
    body: z.object({ authorized: z.boolean() }),
    act: async (_n, body) => {
      if (!body.authorized) throw badField('authorized', 'Headway has no device approval, so a device cannot be de-authorized: set its key to expire (headway nodes expire) or delete it');
    },
  }),
  deviceWrite({
    what: 'name', operationId: 'v2SetDeviceName', summary: 'Rename a device',
    description: 'Sets the MagicDNS name: a DNS label, or the full name ending in the tailnet\'s domain. Unique in the tailnet.',
    body: z.object({ name: z.string().meta({ examples: ['laptop'] }) }), errors: [409],
    act: async (n, body, deps) => {
      try { await deps.state.nodes.rename(n.id, deviceName(deps, body.name)); } catch (err) { throw renamedField(err); }
    },
  }),
  deviceWrite({
    what: 'tags', operationId: 'v2SetDeviceTags', summary: 'Set the tags of a device',
    description: "Replaces the tags; each must be in the policy's tagOwners. An OAuth token may add only the tags its client may assign.",
    body: z.object({ tags: z.array(z.string()).meta({ examples: [['tag:server']] }) }),
    act: async (n, body, deps, ctx) => {
      checkAssignableTags(principalOf(ctx), body.tags.map((t) => t.trim()), n.tags);
      await ops.setNodeTags(deps, n.id, body.tags);
    },
  }),
  deviceWrite({
    what: 'key', operationId: 'v2SetDeviceKey', summary: 'Set key expiry',
    description: '`keyExpiryDisabled: true`: the key never expires. `false` on a key that never expires: it expires node.expiry from now (refused while node.expiry is 0).',
    body: z.object({ keyExpiryDisabled: z.boolean() }),
    act: async (n, body, deps) => {
      if (body.keyExpiryDisabled) { if (n.expiry !== null) await ops.setNodeExpiry(deps, n.id, { disable: true }); return; }
      if (n.expiry !== null) return;
      const ms = deps.config.node.expiry;
      if (!ms) throw badField('keyExpiryDisabled', 'false needs a key duration, and node.expiry is 0 (node keys never expire): set node.expiry in the config, or expire this key with headway nodes expire');
      await ops.setNodeExpiry(deps, n.id, { at: new Date(Date.now() + ms), disable: false });
    },
  }),
  deviceWrite({
    what: 'ip', operationId: 'v2SetDeviceIp', summary: 'Set the IPv4 address of a device',
    description: 'A free address inside prefixes.v4; the device and its peers get it with their next map update.',
    body: z.object({ ipv4: z.string().meta({ examples: ['100.64.0.42'] }) }), errors: [409],
    act: (n, body, deps) => deps.state.nodes.setIPv4(n.id, body.ipv4),
  }),
  route({
    method: 'GET', path: '/api/v2/device/:id/routes', operationId: 'v2GetDeviceRoutes', tag: 'v2:Devices', summary: 'Get subnet routes',
    description: 'The routes the device advertises and those enabled (approved) for it.',
    params: DeviceParams,
    response: DeviceRoutes, responseDescription: 'Advertised and enabled routes',
    errors: [403, 404], scope: { resource: 'devices:routes', write: false },
    handle: async ({ params }, deps) => routesOf(device(deps, params.id)),
  }),
  route({
    method: 'POST', path: '/api/v2/device/:id/routes', operationId: 'v2SetDeviceRoutes', tag: 'v2:Devices', summary: 'Set enabled subnet routes',
    description: 'Replaces the enabled (approved) routes; a route may be enabled before the device advertises it. Either exit route enables both.',
    params: DeviceParams, body: z.object({ routes: Routes }),
    response: DeviceRoutes, responseDescription: 'Advertised and enabled routes',
    errors: [403, 404], scope: { resource: 'devices:routes', write: true },
    handle: async ({ params, body }, deps) => routesOf(await ops.approveNodeRoutes(deps, device(deps, params.id).id, body.routes)),
  }),
];

function routesOf(n: Node) {
  return { advertisedRoutes: n.availableRoutes, enabledRoutes: n.approvedRoutes };
}

/** renamedField names the v2 body's `name` in a rename refusal (the node store names /api/v1's `newName`). */
function renamedField(err: unknown): unknown {
  if (!(err instanceof HeadwayError) || err.field !== 'newName') return err;
  return new HeadwayError(err.code, err.message.replace(/^newName: /, 'name: '), 'name');
}
