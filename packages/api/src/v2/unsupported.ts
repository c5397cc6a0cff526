import { z } from 'zod';
import { HeadwayError } from '@headway/core';
import { pathParams, route, type Method, type Route } from '../route.js';
import { Empty } from '../schemas.js';
import type { Scope, ScopeResource } from './scopes.js';
import { checkTailnet, Tailnet } from './tailnet.js';

/*
 * The parts of Tailscale's API Headway does not have. Each call its official client
 * makes is a route here, so it authenticates and checks its scope like any other and
 * then answers 501 in Tailscale's error shape, saying what Headway lacks, instead of
 * the 404 of an unknown path (which clients read as "that object does not exist").
 */

interface Area { what: string; scope: ScopeResource; calls: Array<[Method, string, string, string]> }

/** AREAS: per missing feature, its message, its scope, and the client's calls as [method, path under /api/v2, operationId, summary]. */
const AREAS: Area[] = [
  {
    what: 'contacts (account e-mail addresses) are not available on a Headway server: it sends no e-mail', scope: 'account_settings',
    calls: [
      ['GET', '/tailnet/:tailnet/contacts', 'v2GetContacts', 'Get contacts'],
      ['PATCH', '/tailnet/:tailnet/contacts/:contactType', 'v2UpdateContact', 'Update a contact'],
    ],
  },
  {
    what: 'webhooks are not available on a Headway server: use its Prometheus metrics and logs', scope: 'webhooks',
    calls: [
      ['GET', '/tailnet/:tailnet/webhooks', 'v2ListWebhooks', 'List webhooks'],
      ['POST', '/tailnet/:tailnet/webhooks', 'v2CreateWebhook', 'Create a webhook'],
      ['GET', '/webhooks/:endpointId', 'v2GetWebhook', 'Get a webhook'],
      ['PATCH', '/webhooks/:endpointId', 'v2UpdateWebhook', 'Update a webhook'],
      ['DELETE', '/webhooks/:endpointId', 'v2DeleteWebhook', 'Delete a webhook'],
      ['POST', '/webhooks/:endpointId/test', 'v2TestWebhook', 'Test a webhook'],
      ['POST', '/webhooks/:endpointId/rotate', 'v2RotateWebhookSecret', 'Rotate a webhook secret'],
    ],
  },
  {
    what: "log streaming and Tailscale's configuration and network flow logs are not available on a Headway server: it writes its own log to stdout or a file (log.*)", scope: 'logs',
    calls: [
      ['GET', '/tailnet/:tailnet/logging/:logType/stream', 'v2GetLogStream', 'Get log streaming configuration'],
      ['PUT', '/tailnet/:tailnet/logging/:logType/stream', 'v2SetLogStream', 'Set log streaming configuration'],
      ['DELETE', '/tailnet/:tailnet/logging/:logType/stream', 'v2DeleteLogStream', 'Delete log streaming configuration'],
      ['GET', '/tailnet/:tailnet/logging/configuration', 'v2GetConfigurationLogs', 'Get configuration audit logs'],
      ['GET', '/tailnet/:tailnet/logging/network', 'v2GetNetworkFlowLogs', 'Get network flow logs'],
      ['POST', '/tailnet/:tailnet/aws-external-id', 'v2CreateAwsExternalId', 'Create an AWS external id'],
      ['POST', '/tailnet/:tailnet/aws-external-id/:externalId/validate-aws-trust-policy', 'v2ValidateAwsTrustPolicy', 'Validate an AWS trust policy'],
    ],
  },
  {
    what: 'device posture integrations are not available on a Headway server', scope: 'feature_settings',
    calls: [
      ['GET', '/tailnet/:tailnet/posture/integrations', 'v2ListPostureIntegrations', 'List posture integrations'],
      ['POST', '/tailnet/:tailnet/posture/integrations', 'v2CreatePostureIntegration', 'Create a posture integration'],
      ['GET', '/posture/integrations/:integrationId', 'v2GetPostureIntegration', 'Get a posture integration'],
      ['PATCH', '/posture/integrations/:integrationId', 'v2UpdatePostureIntegration', 'Update a posture integration'],
      ['DELETE', '/posture/integrations/:integrationId', 'v2DeletePostureIntegration', 'Delete a posture integration'],
    ],
  },
  {
    what: 'device posture attributes are not available on a Headway server', scope: 'devices:posture_attributes',
    calls: [
      ['GET', '/device/:id/attributes', 'v2GetPostureAttributes', 'Get posture attributes'],
      ['POST', '/device/:id/attributes/:attributeKey', 'v2SetPostureAttribute', 'Set a posture attribute'],
      ['DELETE', '/device/:id/attributes/:attributeKey', 'v2DeletePostureAttribute', 'Delete a posture attribute'],
    ],
  },
  {
    what: 'services (VIP services) are not available on a Headway server', scope: 'services',
    calls: [
      ['GET', '/tailnet/:tailnet/vip-services', 'v2ListServices', 'List services'],
      ['GET', '/tailnet/:tailnet/vip-services/:serviceName', 'v2GetService', 'Get a service'],
      ['PUT', '/tailnet/:tailnet/vip-services/:serviceName', 'v2SetService', 'Create or update a service'],
      ['DELETE', '/tailnet/:tailnet/vip-services/:serviceName', 'v2DeleteService', 'Delete a service'],
    ],
  },
  {
    what: 'a Headway server serves one tailnet: tailnets are not created, listed or deleted through the API', scope: 'feature_settings',
    calls: [
      ['GET', '/organizations/:organization/tailnets', 'v2ListTailnets', 'List tailnets'],
      ['POST', '/organizations/:organization/tailnets', 'v2CreateTailnet', 'Create a tailnet'],
      ['DELETE', '/tailnet/:tailnet', 'v2DeleteTailnet', 'Delete the tailnet'],
    ],
  },
];

/** notServed is one call of a missing feature: authenticated and scope-checked, then a 501 saying what is missing. */
function notServed(area: Area, [method, path, operationId, summary]: Area['calls'][number]): Route {
  const full = `/api/v2${path}`;
  const params = z.object(Object.fromEntries(pathParams(full).map((p) => [p, p === 'tailnet' ? Tailnet : z.string()])));
  const scope: Scope = { resource: area.scope, write: method !== 'GET' };
  const message = area.what.charAt(0).toUpperCase() + area.what.slice(1);
  return route({
    method, path: full, operationId, tag: 'v2:Not served', summary,
    description: `Not served: answers 501. ${message}.`,
    params, response: Empty, responseDescription: 'Never answered: the call is a 501',
    errors: [403, 404, 501], scope,
    handle: async ({ params: p }, deps) => {
      if (typeof p.tailnet === 'string') checkTailnet(deps, p.tailnet);
      throw new HeadwayError('not_implemented', message);
    },
  });
}

export const UNSUPPORTED_ROUTES: Route[] = AREAS.flatMap((a) => a.calls.map((c) => notServed(a, c)));
