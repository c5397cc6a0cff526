import { Flags } from '@oclif/core';
import { HeadwayCommand, type ApiNode, nodeJson, commandAliases } from '@headway/cli';

/** NodesRegister is the deprecated spelling of `auth register` (headscale 0.29 deprecated it too); kept for scripts. */
export default class NodesRegister extends HeadwayCommand {
  static override summary = 'Register a waiting device to a user (deprecated: use `auth register --auth-id ID --user USER`)';
  static override hiddenAliases = commandAliases('nodes', 'register');
  static override flags = {
    user: Flags.string({ char: 'u', description: 'user (name or id) that will own the node', required: true }),
    key: Flags.string({ char: 'k', description: 'registration key shown in the login URL (the auth ID)', required: true }),
  };

  static override examples = ['<%= config.bin %> nodes register --user alice --key 5nKv1mxXeSEa2sGl8xwvWzQm'];

  async run(): Promise<void> {
    const { flags } = await this.parse(NodesRegister);
    process.stderr.write('Command "nodes register" is deprecated, use "headway auth register --auth-id <id> --user <user>" instead\n');
    const { node } = await this.client().post<{ node: ApiNode }>('/api/v1/node/register', undefined, { user: flags.user, key: flags.key });
    this.print(nodeJson(node), `Node ${node.givenName || node.name} registered`);
  }
}
