import { HeadwayCommand, UsageError, idFlag, listFlag, splitList, type ApiNode, nodeJson, checkRoutes, commandAliases, seg } from '@headway/cli';

export default class NodesApproveRoutes extends HeadwayCommand {
  static override summary = 'Replace the approved routes of a node (--routes "" removes them all)';
  static override hiddenAliases = commandAliases('nodes', 'approve-routes');
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
    routes: listFlag({ char: 'r', description: 'routes to approve, comma-separated (10.0.0.0/8,192.168.0.0/24)' }),
  };

  static override examples = [
    '<%= config.bin %> nodes approve-routes -i 7 --routes 10.0.0.0/24,0.0.0.0/0,::/0',
    '<%= config.bin %> nodes approve-routes -i 7 --routes ""',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesApproveRoutes);
    if (flags.routes === undefined) throw new UsageError('pass --routes CIDR,... (or --routes "" to remove all approved routes)');
    const routes = checkRoutes(splitList(flags.routes));
    const { node } = await this.client().post<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}/approve_routes`, { routes });
    this.print(nodeJson(node), 'Node updated');
  }
}
