import { z } from 'zod';
import { badField } from '@headway/core';
import { route, type ApiDeps, type Route } from '../route.js';
import { Empty } from '../schemas.js';
import { checkTailnet, Tailnet } from './tailnet.js';

/*
 * Tailscale's tailnet settings, read from what Headway has: its configuration file
 * (node.expiry, policy.mode, dns.certificates.enabled) or what Headway does not have
 * (device and user approval, flow logs, posture collection). None lives in the
 * database, so a PATCH that would change one is refused naming where it is set; a
 * PATCH that changes nothing succeeds.
 */

const DAY_MS = 86_400_000;
const ROUTE_SELECTION = ['active-passive-failover', 'regional-routing', 'regional-routing-failover', 'magicroute'] as const;
const JOIN_ROLES = ['none', 'admin', 'member'] as const;

const Settings = z.object({
  aclsExternallyManagedOn: z.boolean().meta({ description: 'true unless policy.mode is database: the policy is edited outside this API' }),
  aclsExternalLink: z.string(),
  devicesApprovalOn: z.boolean().meta({ description: 'Always false: Headway has no device approval' }),
  devicesAutoUpdatesOn: z.boolean().meta({ description: 'Always false: Headway does not tell clients to update' }),
  devicesKeyDurationDays: z.number().int().meta({ description: 'node.expiry in days; 0 when node keys never expire' }),
  usersApprovalOn: z.boolean(),
  usersRoleAllowedToJoinExternalTailnets: z.enum(JOIN_ROLES),
  networkFlowLoggingOn: z.boolean(),
  regionalRoutingOn: z.boolean(),
  postureIdentityCollectionOn: z.boolean(),
  httpsEnabled: z.boolean().meta({ description: 'dns.certificates.enabled: devices may get HTTPS certificates' }),
  routeSelection: z.enum(ROUTE_SELECTION).meta({ description: 'Always active-passive-failover: one primary router per route, another takes over when it fails' }),
}).meta({ id: 'V2TailnetSettings', description: 'Settings of the tailnet' });
type SettingsView = z.output<typeof Settings>;

/** settingsOf maps Headway's configuration onto Tailscale's settings. */
function settingsOf(deps: ApiDeps): SettingsView {
  const c = deps.config;
  return {
    aclsExternallyManagedOn: c.policy.mode !== 'database', aclsExternalLink: '',
    devicesApprovalOn: false, devicesAutoUpdatesOn: false, devicesKeyDurationDays: Math.round(c.node.expiry / DAY_MS),
    usersApprovalOn: false, usersRoleAllowedToJoinExternalTailnets: 'none',
    networkFlowLoggingOn: false, regionalRoutingOn: false, postureIdentityCollectionOn: false,
    httpsEnabled: c.dns.certificates.enabled, routeSelection: 'active-passive-failover',
  };
}

/** WHERE says, per setting, where it is changed, or that Headway does not have it. */
const WHERE: Record<keyof SettingsView, string> = {
  aclsExternallyManagedOn: 'is set by policy.mode in the config file (database: the policy is edited through the API)',
  aclsExternalLink: 'cannot be set: Headway keeps no link to an external policy editor',
  devicesApprovalOn: 'cannot be turned on: Headway has no device approval',
  devicesAutoUpdatesOn: 'cannot be turned on: Headway does not tell clients to update themselves',
  devicesKeyDurationDays: 'is set by node.expiry in the config file',
  usersApprovalOn: 'cannot be turned on: Headway has no user approval',
  usersRoleAllowedToJoinExternalTailnets: 'cannot be changed: Headway has no device sharing between tailnets',
  networkFlowLoggingOn: 'cannot be turned on: Headway has no network flow logs',
  regionalRoutingOn: 'cannot be turned on: Headway elects one primary router per route',
  postureIdentityCollectionOn: 'cannot be turned on: Headway does not collect device posture',
  httpsEnabled: 'is set by dns.certificates.enabled in the config file',
  routeSelection: 'cannot be changed: Headway elects one primary router per route (active-passive-failover)',
};

const Patch = z.object(Object.fromEntries(Object.entries(Settings.shape).map(([k, v]) => [k, v.nullable().optional()])) as {
  [K in keyof SettingsView]: z.ZodOptional<z.ZodNullable<(typeof Settings.shape)[K]>>
}).strict();

export const SETTINGS_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/settings', operationId: 'v2GetTailnetSettings', tag: 'v2:Tailnet Settings', summary: 'Get tailnet settings',
    description: "The tailnet's settings, from Headway's configuration.",
    params: z.object({ tailnet: Tailnet }),
    response: Settings, responseDescription: 'The settings',
    errors: [403, 404], scope: { resource: 'feature_settings', write: false },
    handle: async ({ params }, deps) => { checkTailnet(deps, params.tailnet); return settingsOf(deps); },
  }),
  route({
    method: 'PATCH', path: '/api/v2/tailnet/:tailnet/settings', operationId: 'v2UpdateTailnetSettings', tag: 'v2:Tailnet Settings', summary: 'Update tailnet settings',
    description: 'Every setting lives in the config file or is one Headway does not have: a field that would change a setting is a 400 naming where it is set; fields equal to the current value (or null) change nothing.',
    params: z.object({ tailnet: Tailnet }), body: Patch,
    response: Empty, responseDescription: 'Nothing needed changing',
    errors: [403, 404], scope: { resource: 'feature_settings', write: true }, readOnly: true,
    handle: async ({ params, body }, deps) => {
      checkTailnet(deps, params.tailnet);
      if (body.regionalRoutingOn != null && body.routeSelection != null) throw badField('routeSelection', 'cannot be combined with regionalRoutingOn');
      const now = settingsOf(deps);
      for (const key of Object.keys(WHERE) as Array<keyof SettingsView>) {
        const wanted = body[key];
        if (wanted != null && wanted !== now[key]) throw badField(key, `${WHERE[key]} (it is ${JSON.stringify(now[key])})`);
      }
      return {};
    },
  }),
];
