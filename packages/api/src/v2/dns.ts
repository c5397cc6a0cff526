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
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/dns/preferences', operationId: 'v2GetDnsPreferences', tag: 'v2:DNS', summary: 'Get DNS preferences',
    description: 'Whether MagicDNS is on.',
    params, response: z.object({ magicDNS: z.boolean() }), responseDescription: 'The preferences', errors: [403, 404], scope: read,
    handle: async ({ params: p }, deps) => ({ magicDNS: current(deps, p.tailnet).magicDns }),
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/dns/preferences', operationId: 'v2SetDnsPreferences', tag: 'v2:DNS', summary: 'Set DNS preferences',
    description: `Turns MagicDNS on or off (on needs dns.base_domain). Devices get their new DNS config at once. ${WRITES}`,
    params, body: z.object({ magicDNS: z.boolean() }),
    response: z.object({ magicDNS: z.boolean() }), responseDescription: 'The preferences now in force', errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => ({ magicDNS: (await update(deps, p.tailnet, (c) => ({ ...c, magicDns: body.magicDNS }))).magicDns }),
  }),
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/dns/searchpaths', operationId: 'v2ListDnsSearchPaths', tag: 'v2:DNS', summary: 'List search paths',
    description: 'The extra search domains (besides the MagicDNS domain).',
    params, response: z.object({ searchPaths: Domains }), responseDescription: 'The search paths', errors: [403, 404], scope: read,
    handle: async ({ params: p }, deps) => ({ searchPaths: current(deps, p.tailnet).searchDomains }),
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/dns/searchpaths', operationId: 'v2SetDnsSearchPaths', tag: 'v2:DNS', summary: 'Set search paths',
    description: `Replaces the search domains. ${WRITES}`,
    params, body: z.object({ searchPaths: Domains }),
    response: z.object({ searchPaths: Domains }), responseDescription: 'The search paths now in force', errors: [403, 404], scope: write,
    handle: async ({ params: p, body }, deps) => ({ searchPaths: (await update(deps, p.tailnet, (c) => ({ ...c, searchDomains: body.searchPaths }))).searchDomains }),
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
