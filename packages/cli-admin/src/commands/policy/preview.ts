import { readFileSync } from 'node:fs';
import { Flags } from '@oclif/core';
import YAML from 'yaml';
import { previewPolicy, type FilterRule, type PreviewResult, type Topology } from '@headway/policy';
import { HeadwayCommand, commandAliases } from '@headway/cli';
import { readPolicyFile } from '../../policy-check.js';

export default class PolicyPreview extends HeadwayCommand {
  static override summary = 'Show what each node of a topology would get under a policy (offline)';
  static override hiddenAliases = commandAliases('policy', 'preview');
  static override flags = {
    file: Flags.string({ char: 'f', description: 'policy file (HuJSON)', required: true }),
    topology: Flags.string({ description: 'topology file (JSON or YAML: users[], nodes{name: {tags, user, ipv4, ipv6, routable_ips, approved_routes}})', required: true }),
  };

  static override examples = [
    '<%= config.bin %> policy preview -f policy.hujson --topology topology.yaml',
    '<%= config.bin %> policy preview -f policy.hujson --topology topology.json -o json',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicyPreview);
    const text = readPolicyFile(flags.file);
    const topology = readTopology(flags.topology);
    const result = previewPolicy(text, topology);
    if (!result.accepted) {
      if (this.outputFormat) {
        // The machine-readable result already says why; exit 1 without a second document.
        this.print(result, '');
        process.exitCode = 1;
        return;
      }
      throw new Error(`${flags.file}: policy rejected: ${result.error ?? 'unknown reason'}`);
    }
    this.print(result, () => renderPreview(result));
  }
}

function readTopology(path: string): Topology {
  let raw: unknown;
  try {
    raw = YAML.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new Error(err.code === 'ENOENT' ? `topology file ${path} does not exist` : `${path}: ${err.message.split('\n')[0]}`);
  }
  const t = raw as Partial<Topology> | null;
  if (!t || typeof t !== 'object' || !Array.isArray(t.users) || !t.nodes || typeof t.nodes !== 'object' || Array.isArray(t.nodes)) {
    throw new Error(`${path}: a topology needs "users" (a list) and "nodes" (a mapping of node name to {tags, user, ipv4, ...})`);
  }
  for (const [name, n] of Object.entries(t.nodes)) {
    if (!n || typeof n !== 'object') throw new Error(`${path}: node ${name} must be a mapping`);
    if (!Array.isArray(n.tags)) n.tags = [];
  }
  return t as Topology;
}

function ports(p: { First: number; Last: number }): string {
  if (p.First === 0 && p.Last === 65535) return '*';
  return p.First === p.Last ? String(p.First) : `${p.First}-${p.Last}`;
}

function ruleLine(r: FilterRule): string {
  const proto = r.IPProto?.length ? ` proto ${r.IPProto.join(',')}` : '';
  if (r.DstPorts?.length) {
    return `${r.SrcIPs.join(', ')} -> ${r.DstPorts.map((d) => `${d.IP.includes(':') ? `[${d.IP}]` : d.IP}:${ports(d.Ports)}`).join(', ')}${proto}`;
  }
  if (r.CapGrant?.length) {
    return `${r.SrcIPs.join(', ')} -> ${r.CapGrant.map((g) => `${g.Dsts.join(', ')} caps ${Object.keys(g.CapMap).join(', ')}`).join('; ')}`;
  }
  return `${r.SrcIPs.join(', ')}${proto}`;
}

/** renderPreview lists, per node, its addresses, the packet filter it would receive and the peers it would see. */
export function renderPreview(result: PreviewResult): string {
  const out: string[] = [];
  for (const [name, node] of Object.entries(result.nodes)) {
    out.push(`${name}${node.self.Addresses?.length ? ` (${node.self.Addresses.join(', ')})` : ''}`);
    if (node.self.Tags?.length) out.push(`  tags: ${node.self.Tags.join(', ')}`);
    out.push('  filter rules:');
    if (node.packet_filter_rules.length === 0) out.push('    (none: nothing may connect to this node)');
    for (const r of node.packet_filter_rules) out.push(`    ${ruleLine(r)}`);
    out.push(`  peers: ${node.peers.length ? node.peers.map((p) => p.name).join(', ') : '(none)'}`);
  }
  return out.join('\n');
}
