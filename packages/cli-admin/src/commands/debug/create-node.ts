import { Flags } from '@oclif/core';
import { HeadwayCommand, listFlag, splitList, type ApiNode, nodeJson, checkRoutes, commandAliases } from '@headway/cli';

export default class DebugCreateNode extends HeadwayCommand {
  static override summary = 'Create a node record without a device (tests and demos)';
  static override hiddenAliases = commandAliases('debug', 'create-node');
  static override flags = {
    user: Flags.string({ char: 'u', description: 'owner (name or id)', required: true }),
    name: Flags.string({ description: 'hostname of the node', required: true }),
    key: Flags.string({ char: 'k', description: 'machine key (default: a random one)' }),
    route: listFlag({ char: 'r', description: 'announced route (CIDR); repeatable or comma-separated' }),
  };

  static override examples = [
    '<%= config.bin %> debug create-node --user alice --name test-box',
    '<%= config.bin %> debug create-node --user alice --name router --route 10.0.0.0/24,192.168.1.0/24',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(DebugCreateNode);
    const routes = checkRoutes(splitList(flags.route), '--route');
    const body: Record<string, unknown> = { user: flags.user, name: flags.name };
    if (flags.key) body.key = flags.key;
    if (routes.length) body.routes = routes;
    const { node } = await this.client().post<{ node: ApiNode }>('/api/v1/debug/node', body);
    this.print(nodeJson(node), 'Node created');
  }
}
