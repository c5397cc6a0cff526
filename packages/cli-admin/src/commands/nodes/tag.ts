import { HeadwayCommand, UsageError, idFlag, listFlag, splitList, type ApiNode, nodeJson, checkTags, commandAliases, seg } from '@headway/cli';

export default class NodesTag extends HeadwayCommand {
  static override summary = 'Replace the tags of a node; a tagged node has no user and keeps at least one tag';
  static override hiddenAliases = commandAliases('nodes', 'tag', ['tags', 't']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
    tags: listFlag({ char: 't', description: 'tags to set, comma-separated (tag:a,tag:b)' }),
  };

  static override examples = [
    '<%= config.bin %> nodes tag -i 7 --tags tag:server,tag:prod',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesTag);
    if (flags.tags === undefined) throw new UsageError('pass --tags tag:a,tag:b (a tagged node keeps at least one tag; a user\'s login untags it)');
    const tags = checkTags(splitList(flags.tags));
    const { node } = await this.client().post<{ node: ApiNode }>(`/api/v1/node/${seg(flags.identifier)}/tags`, { tags });
    this.print(nodeJson(node), 'Node updated');
  }
}
