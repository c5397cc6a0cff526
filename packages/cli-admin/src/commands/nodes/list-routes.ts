import { HeadwayCommand, idFlag, type ApiNode, nodeJson, routesTable, commandAliases, seg } from '@headway/cli';

export default class NodesListRoutes extends HeadwayCommand {
  static override summary = 'List the routes nodes announce, have approved, and serve';
  static override hiddenAliases = commandAliases('nodes', 'list-routes', ['lsr', 'routes']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'only this node' }),
  };

  static override examples = ['<%= config.bin %> nodes list-routes', '<%= config.bin %> nodes list-routes -i 7 -o json'];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesListRoutes);
    let nodes: ApiNode[];
    if (flags.identifier) {
      nodes = [(await this.client().get<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}`)).node];
    } else {
      const all = (await this.client().get<{ nodes: ApiNode[] }>('/api/v1/node')).nodes ?? [];
      // Like headscale, the overview leaves out nodes that have nothing to do with routes.
      nodes = all.filter((n) => n.approvedRoutes?.length || n.availableRoutes?.length || n.subnetRoutes?.length);
    }
    this.print(nodes.map(nodeJson), () => routesTable(nodes));
  }
}
