import { DNS, type AdapterDescriptor, type DnsPort } from '@headway/core/ports';

/**
 * ChallTestSrvPublisher publishes the ACME DNS-01 records of device certificates in
 * pebble-challtestsrv, the DNS server that comes with pebble (Let's Encrypt's test
 * CA), through its management API: `POST /clear-txt {host}` then one
 * `POST /set-txt {host, value}` per value. It is the smallest provider of the DNS
 * port's ACME-challenge capability and the template for another one (a Cloudflare
 * or Route 53 API): setTxt replaces the whole TXT set at a name, removeTxt deletes
 * it, both resolve only once the provider has taken the change. Meant for a lab
 * with pebble, never for a real CA.
 */
export class ChallTestSrvPublisher implements DnsPort {
  constructor(private readonly managementUrl: string) {}

  async setTxt(fqdn: string, values: string[]): Promise<void> {
    await this.post('/clear-txt', { host: `${fqdn}.` });
    for (const value of values) await this.post('/set-txt', { host: `${fqdn}.`, value });
  }

  async removeTxt(fqdn: string): Promise<void> {
    await this.post('/clear-txt', { host: `${fqdn}.` });
  }

  private async post(path: string, body: unknown): Promise<void> {
    const res = await fetch(new URL(path, this.managementUrl), { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
    if (!res.ok) throw new Error(`pebble-challtestsrv ${path} answered ${res.status}`);
  }
}

/** ChallTestSrvOptions are this plugin's `options:`. */
export interface ChallTestSrvOptions {
  /** management_url: pebble-challtestsrv's management API, e.g. http://127.0.0.1:8055. */
  management_url: string;
}

const descriptor: AdapterDescriptor<ChallTestSrvOptions> = {
  port: 'dns',
  id: 'challtestsrv',
  validate(options) {
    const problems = [];
    for (const key of Object.keys(options)) {
      if (key !== 'management_url') problems.push({ option: key, message: 'unknown option (this plugin takes: management_url)' });
    }
    const url = options.management_url;
    if (url === undefined) problems.push({ option: 'management_url', message: 'required: pebble-challtestsrv\'s management API, e.g. http://127.0.0.1:8055' });
    else if (typeof url !== 'string' || !URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
      problems.push({ option: 'management_url', message: `expected an http(s) URL, found ${JSON.stringify(url)}` });
    }
    return problems;
  },
  register({ container, options }) {
    const plugin = new ChallTestSrvPublisher(options!.management_url);
    container.register(DNS, { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;
