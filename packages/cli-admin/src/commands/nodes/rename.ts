import { Args } from '@oclif/core';
import { HeadwayCommand, UsageError, idFlag, type ApiNode, nodeJson, seg, commandAliases } from '@headway/cli';

export default class NodesRename extends HeadwayCommand {
  static override summary = "Rename a node (its tailnet name; the device's hostname is unchanged)";
  static override hiddenAliases = commandAliases('nodes', 'rename');
  static override args = { newName: Args.string({ name: 'NEW_NAME', description: 'new name', required: true }) };
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
  };

  static override examples = ['<%= config.bin %> nodes rename -i 7 build-server'];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(NodesRename);
    if (!args.newName.trim()) throw new UsageError('NEW_NAME: give the new name (it is empty)');
    const { node } = await this.client().post<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}/rename/${seg(args.newName)}`);
    this.print(nodeJson(node), 'Node renamed');
  }
}
