import { HeadwayCommand, idFlag, type ApiNode, commandAliases, seg } from '@headway/cli';

export default class NodesDelete extends HeadwayCommand {
  static override summary = 'Delete a node';
  static override hiddenAliases = commandAliases('nodes', 'delete', ['del']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
  };

  static override examples = ['<%= config.bin %> nodes delete -i 7', '<%= config.bin %> nodes delete -i 7 --force'];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesDelete);
    const { node } = await this.client().get<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}`);
    if (!(await this.confirm(`Delete the node ${JSON.stringify(node.givenName || node.name)} (${node.id})?`))) {
      this.print({ Result: 'Node not deleted' }, 'Node not deleted');
      return;
    }
    await this.client().delete(`/api/v1/node/${seg(flags.identifier)}`);
    this.print({}, 'Node deleted');
  }
}
