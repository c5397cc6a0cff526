import { readFileSync, watch } from 'node:fs';
import type { AdapterDescriptor, DnsPort, DnsRecord } from '@headway/core/ports';

/**
 * HostsFileRecords serves every line of an /etc/hosts-style file (`IP name...`)
 * as MagicDNS extra records, re-reading the file when it changes. It shows how a
 * third-party package plugs a port into Headway: default-export a descriptor,
 * register an object implementing the port under the port's name.
 */
export class HostsFileRecords implements DnsPort {
  constructor(private readonly path: string) {}

  async records(): Promise<DnsRecord[]> {
    const out: DnsRecord[] = [];
    const text = readFileSync(this.path, 'utf8');
    for (const [i, raw] of text.split('\n').entries()) {
      const line = raw.replace(/#.*/, '').trim();
      if (!line) continue;
      const [ip, ...names] = line.split(/\s+/);
      if (!ip || !names.length) throw new Error(`${this.path}:${i + 1}: expected "IP name [name...]"`);
      const type = ip.includes(':') ? 'AAAA' : 'A';
      for (const name of names) out.push({ name, type, value: ip });
    }
    return out;
  }

  watch(onChange: () => void): () => void {
    const w = watch(this.path, () => onChange());
    return () => w.close();
  }
}

const descriptor: AdapterDescriptor = {
  port: 'dns',
  id: 'hosts-file',
  register({ container }) {
    // Configured through the environment so the plugin needs no config keys of its own.
    const path = process.env.HEADWAY_DNS_HOSTS_FILE;
    if (!path) throw new Error('set HEADWAY_DNS_HOSTS_FILE to the hosts file to serve');
    const plugin = new HostsFileRecords(path);
    container.register('dns', { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;
