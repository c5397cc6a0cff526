// Address helpers for tests that read a real client's packet filter.

/**
 * expandIps turns SrcIPs entries (bare addresses or small CIDRs: the server may
 * merge adjacent addresses, e.g. 100.64.0.2/31) into sorted single addresses,
 * so sets can be compared whatever the encoding.
 */
export function expandIps(entries: string[]): string[] {
  const out: string[] = [];
  const toBig = (ip: string): bigint => (ip.includes(':') ? ipv6ToBig(ip) : BigInt(ip.split('.').reduce((n, o) => n * 256 + Number(o), 0)));
  for (const entry of entries) {
    if (!/^[0-9a-f.:/-]+$/i.test(entry)) throw new Error(`expandIps: SrcIPs entry ${JSON.stringify(entry)} is not an address, prefix or range`);
    let first: bigint;
    let last: bigint;
    const v6 = entry.includes(':');
    if (entry.includes('-')) {
      // tailcfg also allows an inclusive range "a-b".
      const [from, to] = entry.split('-') as [string, string];
      first = toBig(from);
      last = toBig(to);
    } else {
      const [ip, bitsText] = entry.split('/') as [string, string | undefined];
      const width = v6 ? 128 : 32;
      const hostBits = BigInt(width - (bitsText === undefined ? width : Number(bitsText)));
      first = (toBig(ip) >> hostBits) << hostBits;
      last = first + (1n << hostBits) - 1n;
    }
    if (last - first > 255n) throw new Error(`expandIps: SrcIPs entry ${JSON.stringify(entry)} is too wide to enumerate`);
    for (let n = first; n <= last; n++) out.push(v6 ? bigToIpv6(n) : bigToIpv4(n));
  }
  return out.sort();
}

function ipv6ToBig(ip: string): bigint {
  const [head, tail] = ip.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const tl = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - tl.length).fill('0'), ...tl];
  return groups.reduce((n, g) => (n << 16n) + BigInt(parseInt(g, 16)), 0n);
}

function bigToIpv6(n: bigint): string {
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((n >> BigInt(i * 16)) & 0xffffn).toString(16));
  // Compress the longest run of zero groups the way Go prints addresses.
  const text = groups.join(':');
  const runs = [...`:${text}:`.matchAll(/(:0)+:/g)].sort((a, b) => b[0].length - a[0].length);
  if (!runs.length || runs[0]![0].length < 5) return text;
  return `:${text}:`.replace(runs[0]![0], '::').replace(/^:(?!:)|(?<!:):$/g, '');
}

function bigToIpv4(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
}
