import { Flags } from '@oclif/core';
import { HeadwayCommand, type ApiNode, nodeJson, nodesTable, commandAliases } from '@headway/cli';

export default class NodesList extends HeadwayCommand {
  static override summary = 'List nodes';
  static override hiddenAliases = commandAliases('nodes', 'list', ['ls', 'show']);
  static override flags = {
    user: Flags.string({ char: 'u', description: 'only nodes of this user (name or id)' }),
  };

  static override examples = ['<%= config.bin %> nodes list', '<%= config.bin %> nodes list --user alice -o json'];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesList);
    const { nodes = [] } = await this.client().get<{ nodes: ApiNode[] }>('/api/v1/node', { user: flags.user });
    this.print(nodes.map(nodeJson), () => nodesTable(nodes));
  }
}
