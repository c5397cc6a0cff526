import { z } from 'zod';
import { DnsSettingsService, silentLogger, type DnsSettings } from '@headway/core';
import { route, type ApiDeps, type Route } from '../route.js';
import { checkTailnet, Tailnet } from './tailnet.js';

/*
 * DNS under /api/v2 as Tailscale serves it: nameservers, MagicDNS, search paths, split DNS and the whole
 * configuration. Reads answer the settings in force; writes go through DnsSettingsService (dns.mode: database:
 * stored, checked, sent to every device on every instance; dns.mode: file: a 400 naming the config keys).
 */

/** settingsOf is the DNS settings service, or one over the config file where the API runs without the kernel's. */
function settingsOf(deps: ApiDeps): DnsSettingsService {
  return deps.dns ?? new DnsSettingsService(deps.config.dns, undefined, deps.state.bus, silentLogger);
}

const Addresses = z.array(z.string()).meta({ description: 'Nameserver IP addresses or DoH URLs (https://...)', examples: [['1.1.1.1', 'https://dns.example.com/dns-query']] });
const Domains = z.array(z.string()).meta({ description: 'Search domains', examples: [['corp.example.com']] });
const SplitDns = z.record(z.string(), z.array(z.string()))
  .meta({ id: 'V2SplitDns', description: 'Domain → the nameserver IP addresses that answer for it', examples: [{ 'corp.example.com': ['10.0.0.53'] }] });
const SplitDnsChange = z.record(z.string(), z.array(z.string()).nullable())
  .meta({ description: 'Domain → nameserver IP addresses; null (or an empty list) removes the domain' });
const Resolver = z.object({
  address: z.string(),
  useWithExitNode: z.boolean().optional().meta({ description: 'Accepted and ignored: Headway sends the same resolvers with or without an exit node' }),
});
const Configuration = z.object({
  nameservers: z.array(Resolver).optional(),
  splitDNS: z.record(z.string(), z.array(Resolver)).optional(),
  searchPaths: z.array(z.string()).optional(),
  preferences: z.object({ overrideLocalDNS: z.boolean().optional(), magicDNS: z.boolean().optional() }).optional(),
}).meta({ id: 'V2DnsConfiguration', description: "The tailnet's whole DNS configuration" });

const read = { resource: 'dns', write: false } as const;
const write = { resource: 'dns', write: true } as const;
const params = z.object({ tailnet: Tailnet });

/** update changes the settings (checked, stored and in force when it resolves) after checking the path's tailnet. */
async function update(deps: ApiDeps, tailnet: string, change: (s: DnsSettings) => DnsSettings): Promise<DnsSettings> {
  checkTailnet(deps, tailnet);
  return settingsOf(deps).update(change);
}

function current(deps: ApiDeps, tailnet: string): DnsSettings {
  checkTailnet(deps, tailnet);
  return settingsOf(deps).current();
}

/** splitWithout drops domains mapped to null or to no nameserver (Tailscale's way of removing one). */
const splitWithout = (m: Record<string, string[] | null>) => Object.fromEntries(Object.entries(m).filter((e): e is [string, string[]] => !!e[1]?.length));

function configuration(s: DnsSettings): z.input<typeof Configuration> {
  return {
    nameservers: s.nameservers.map((address) => ({ address })),
    splitDNS: Object.fromEntries(Object.entries(s.split).map(([d, list]) => [d, list.map((address) => ({ address }))])),
    searchPaths: s.searchDomains,
    preferences: { overrideLocalDNS: s.overrideLocalDns, magicDNS: s.magicDns },
  };
}

const WRITES = 'With dns.mode: file a write is a 400 naming the config keys to edit. A bad value is a 400 naming it, and nothing changes.';

/**
 * fieldRoutes are the GET and POST of a path holding one setting as `{field: value}` (preferences, search paths):
 * GET answers it, POST replaces it and answers what is now in force.
 */
function fieldRoutes<K extends 'magicDns' | 'searchDomains'>(f: {
  path: string; field: string; setting: K; schema: z.ZodType<DnsSettings[K]>; name: string; what: string; read: string; write: string;
}): Route[] {
  const shape = z.object({ [f.field]: f.schema });
  const answer = (s: DnsSettings) => ({ [f.field]: s[f.setting] });
  return [
    route({
      method: 'GET', path: `/api/v2/tailnet/:tailnet/dns/${f.path}`, operationId: `v2Get${f.name}`, tag: 'v2:DNS', summary: `Get ${f.what}`,
      description: f.read, params, response: shape, responseDescription: `The ${f.what}`, errors: [403, 404], scope: read,
      handle: async ({ params: p }, deps) => answer(current(deps, p.tailnet)),
    }),
    route({
      method: 'POST', path: `/api/v2/tailnet/:tailnet/dns/${f.path}`, operationId: `v2Set${f.name}`, tag: 'v2:DNS', summary: `Set ${f.what}`,
      description: `${f.write} ${WRITES}`, params, body: shape,
      response: shape, responseDescription: `The ${f.what} now in force`, errors: [403, 404], scope: write,
      handle: async ({ params: p, body }, deps) => answer(await update(deps, p.tailnet, (c) => ({ ...c, [f.setting]: (body as Record<string, unknown>)[f.field] }))),
    }),
  ];
}

export const DNS_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/dns/nameservers', operationId: 'v2ListDnsNameservers', tag: 'v2:DNS', summary: 'List nameservers',
    description: 'The global nameservers devices use (dns.nameservers.global, or the stored settings with dns.mode: database).',
    params, response: z.object({ dns: Addresses }), responseDescription: 'The nameservers', errors: [403, 404], scope: read,
    handle: async ({ params: p }, deps) => ({ dns: current(deps, p.tailnet).nameservers }),
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/dns/nameservers', operationId: 'v2SetDnsNameservers', tag: 'v2:DNS', summary: 'Set nameservers',
    description: `Replaces the global nameservers. ${WRITES}`,
    params, body: z.object({ dns: Addresses }),
    response: z.object({ dns: Addresses, magicDNS: z.boolean() }), responseDescription: 'The nameservers now in force',
    errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => {
      const s = await update(deps, p.tailnet, (c) => ({ ...c, nameservers: body.dns }));
      return { dns: s.nameservers, magicDNS: s.magicDns };
    },
  }),
  ...fieldRoutes({
    path: 'preferences', field: 'magicDNS', setting: 'magicDns', schema: z.boolean(), name: 'DnsPreferences', what: 'DNS preferences',
    read: 'Whether MagicDNS is on.', write: 'Turns MagicDNS on or off (on needs dns.base_domain). Devices get their new DNS config at once.',
  }),
  ...fieldRoutes({
    path: 'searchpaths', field: 'searchPaths', setting: 'searchDomains', schema: Domains, name: 'DnsSearchPaths', what: 'search paths',
    read: 'The extra search domains (besides the MagicDNS domain).', write: 'Replaces the search domains.',
  }),
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/dns/split-dns', operationId: 'v2GetSplitDns', tag: 'v2:DNS', summary: 'Get split DNS',
    description: 'Domain → the nameservers that answer for it.',
    params, response: SplitDns, responseDescription: 'The split DNS mapping', errors: [403, 404], scope: read,
    handle: async ({ params: p }, deps) => current(deps, p.tailnet).split,
  }),
  route({
    method: 'PATCH', path: '/api/v2/tailnet/:tailnet/dns/split-dns', operationId: 'v2UpdateSplitDns', tag: 'v2:DNS', summary: 'Update split DNS',
    description: `Changes the domains named (null removes one) and keeps the others, in one transaction. ${WRITES}`,
    params, body: SplitDnsChange, bodyKeysAsSent: true,
    response: SplitDns, responseDescription: 'The whole split DNS mapping now in force', errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => (await update(deps, p.tailnet, (c) => {
      const next: Record<string, string[] | null> = { ...c.split, ...body };
      return { ...c, split: splitWithout(next) };
    })).split,
  }),
  route({
    method: 'PUT', path: '/api/v2/tailnet/:tailnet/dns/split-dns', operationId: 'v2SetSplitDns', tag: 'v2:DNS', summary: 'Replace split DNS',
    description: `Replaces the whole mapping ({} removes every domain). ${WRITES}`,
    params, body: SplitDnsChange, bodyKeysAsSent: true,
    response: SplitDns, responseDescription: 'The split DNS mapping now in force', errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => (await update(deps, p.tailnet, (c) => ({ ...c, split: splitWithout(body) }))).split,
  }),
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/dns/configuration', operationId: 'v2GetDnsConfiguration', tag: 'v2:DNS', summary: 'Get the DNS configuration',
    description: 'Nameservers, split DNS, search paths and preferences in one answer.',
    params, response: Configuration, responseDescription: 'The DNS configuration', errors: [403, 404], scope: read,
    handle: async ({ params: p }, deps) => configuration(current(deps, p.tailnet)),
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/dns/configuration', operationId: 'v2SetDnsConfiguration', tag: 'v2:DNS', summary: 'Set the DNS configuration',
    description: `Replaces nameservers, split DNS, search paths and preferences at once (a part left out is emptied, a preference left out is off). ${WRITES}`,
    params, body: Configuration, bodyKeysAsSent: true,
    response: Configuration, responseDescription: 'The DNS configuration now in force', errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => configuration(await update(deps, p.tailnet, () => ({
      nameservers: (body.nameservers ?? []).map((r) => r.address),
      split: Object.fromEntries(Object.entries(body.splitDNS ?? {}).map(([d, list]) => [d, list.map((r) => r.address)])),
      searchDomains: body.searchPaths ?? [],
      magicDns: body.preferences?.magicDNS ?? false, overrideLocalDns: body.preferences?.overrideLocalDNS ?? false,
    }))),
  }),
];
