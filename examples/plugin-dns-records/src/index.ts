import { readFileSync, watch } from 'node:fs';
import { DNS, type AdapterDescriptor, type DnsPort, type DnsRecord } from '@headway/core/ports';

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

/** HostsFileOptions are this plugin's `options:` in its `plugins:` entry. */
export interface HostsFileOptions {
  /** file is the hosts file to serve. */
  file: string;
}

const descriptor: AdapterDescriptor<HostsFileOptions> = {
  port: 'dns',
  id: 'hosts-file',
  // validate names every bad option; Headway runs it at start-up and in `headway config check`.
  validate(options) {
    const problems = [];
    for (const key of Object.keys(options)) {
      if (key !== 'file') problems.push({ option: key, message: 'unknown option (this plugin takes: file)' });
    }
    if (options.file === undefined) problems.push({ option: 'file', message: 'required: the hosts file to serve' });
    else if (typeof options.file !== 'string' || !options.file) problems.push({ option: 'file', message: `expected a file path, found ${JSON.stringify(options.file)}` });
    return problems;
  },
  register({ container, options }) {
    const plugin = new HostsFileRecords(options!.file);
    container.register(DNS, { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;
