import { HeadwayCommand, idFlag, type ApiNode, nodeJson, commandAliases, seg } from '@headway/cli';

export default class NodesExpire extends HeadwayCommand {
  static override summary = 'Expire (log out) a node now';
  static override hiddenAliases = commandAliases('nodes', 'expire', ['logout', 'exp', 'e']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
  };

  static override examples = ['<%= config.bin %> nodes expire -i 7'];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesExpire);
    const { node } = await this.client().post<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}/expire`);
    this.print(nodeJson(node), 'Node expired');
  }
}
