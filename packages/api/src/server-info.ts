import { z } from 'zod';
import { route, type Route } from './route.js';
import { Time } from './schemas.js';

/*
 * server-info.ts: what an administrator reads about the running server (the console's About and DNS pages, scripts):
 * its build, database, certificate and counts, and the DNS it sends devices beyond /api/v2's settings (the mode that
 * says whether those settings can change, the MagicDNS domain, and the extra records with where each comes from).
 */

const ServerInfo = z.object({
  version: z.string().meta({ description: 'The running build', examples: ['0.9.0'] }),
  commit: z.string().meta({ description: 'The commit it was built from; "unknown" when not recorded', examples: ['unknown'] }),
  serverUrl: z.string().meta({ description: 'server_url', examples: ['https://headway.example.com'] }),
  database: z.object({
    type: z.string().meta({ description: 'database.type', examples: ['sqlite'] }),
    description: z.string().meta({ description: 'Which database, as the server logs it (no password)', examples: ['sqlite /var/lib/headway/db.sqlite'] }),
  }),
  clustered: z.boolean().meta({ description: 'cluster.enabled: GET /api/v1/cluster lists the instances' }),
  tls: z.object({
    source: z.enum(['letsencrypt', 'tls_cert_path']).meta({ description: 'Where the certificate comes from' }),
    notAfter: Time.nullable().meta({ description: 'When the certificate expires; null while Let\'s Encrypt has issued none yet' }),
    status: z.enum(['pass', 'warn', 'fail']).meta({ description: 'fail: none or expired; warn: due for renewal and the last renewal failed' }),
  }).nullable().meta({ description: 'The certificate the main listener serves; null when it serves plain HTTP (or a proxy terminates TLS)' }),
  counts: z.object({
    users: z.number().int(),
    nodes: z.number().int(),
    onlineNodes: z.number().int().meta({ description: 'Nodes holding a map session on this instance or another' }),
  }),
}).meta({ description: 'The running server' });

const DnsRecordSchema = z.object({
  name: z.string().meta({ examples: ['grafana.example.net'] }),
  type: z.string().meta({ examples: ['A'] }),
  value: z.string().meta({ examples: ['100.64.0.5'] }),
  source: z.string().meta({ description: 'Where it is set: dns.extra_records, dns.extra_records_path (its path), or plugin <n> (its place in plugins:)', examples: ['dns.extra_records'] }),
}).meta({ description: 'An extra DNS record every device resolves' });

const DnsInfo = z.object({
  mode: z.enum(['file', 'database']).meta({ description: 'dns.mode: with file the settings under /api/v2/tailnet/-/dns are read-only (the config file holds them)' }),
  baseDomain: z.string().meta({ description: 'dns.base_domain: the MagicDNS domain (empty: MagicDNS cannot be turned on)', examples: ['example.net'] }),
  extraRecords: z.array(DnsRecordSchema).meta({ description: 'Read-only here: edit the source each names' }),
}).meta({ description: 'DNS beyond the settings /api/v2 changes' });

export const SERVER_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v1/server', operationId: 'serverInfo', tag: 'Server', summary: 'The running server',
    description: 'Version, server_url, database, whether it is clustered, the served TLS certificate\'s expiry, and how many users and nodes there are.',
    response: ServerInfo, responseDescription: 'The running server',
    handle: async (_input, deps) => {
      const about = deps.about?.() ?? { version: 'unknown', commit: 'unknown', database: { type: deps.config.database.type, description: '' }, tls: null };
      const nodes = deps.state.nodes.list();
      return {
        ...about, serverUrl: deps.config.server_url, clustered: Boolean(deps.cluster),
        counts: { users: deps.state.users.list().length, nodes: nodes.length, onlineNodes: nodes.filter((n) => deps.state.presence.isOnline(n.id)).length },
      };
    },
  }),
  route({
    method: 'GET', path: '/api/v1/dns', operationId: 'dnsInfo', tag: 'Server', summary: 'DNS mode and extra records',
    description: 'dns.mode, dns.base_domain and the extra records devices receive, each with its source. The settings themselves are under /api/v2/tailnet/-/dns.',
    response: DnsInfo, responseDescription: 'DNS in force',
    handle: async (_input, deps) => ({
      mode: deps.config.dns.mode, baseDomain: deps.config.dns.base_domain,
      extraRecords: deps.dnsRecords?.() ?? deps.config.dns.extra_records.map((r) => ({ ...r, source: 'dns.extra_records' })),
    }),
  }),
];
