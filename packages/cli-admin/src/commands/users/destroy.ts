import { Flags } from '@oclif/core';
import { HeadwayCommand, boolFlag, idFlag, type ApiNode, type ApiPreAuthKey, commandAliases, requireOneOf, resolveUser, seg } from '@headway/cli';

/** listNames shows up to ten names, then how many more, so a prompt stays readable for a big fleet. */
function listNames(names: string[]): string {
  return names.length <= 10 ? names.join(', ') : `${names.slice(0, 10).join(', ')} and ${names.length - 10} more`;
}

export default class UsersDestroy extends HeadwayCommand {
  static override summary = 'Destroy a user and its pre-auth keys (refused while it owns nodes, unless --delete-nodes)';
  static override description = 'As in headscale, --force only skips the question: a user who still owns nodes is refused. --delete-nodes deletes those nodes too (their devices are logged out), with the user and its keys, in one transaction; the question names what goes.';
  static override hiddenAliases = commandAliases('users', 'destroy', ['delete']);
  static override examples = [
    '<%= config.bin %> users destroy --name alice',
    '<%= config.bin %> users destroy --name alice --delete-nodes',
    '<%= config.bin %> users destroy -i 3 --delete-nodes --force',
  ];
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to destroy' }),
    name: Flags.string({ char: 'n', description: 'name of the user (instead of --identifier)' }),
    'delete-nodes': boolFlag({ description: 'also delete the nodes the user owns (otherwise a user with nodes is refused)' }),
  };


  async run(): Promise<void> {
    const { flags } = await this.parse(UsersDestroy);
    requireOneOf(flags, ['identifier', 'name']);
    const user = await resolveUser(this.client(), flags.identifier, flags.name);
    if (!flags['delete-nodes']) {
      // Checked before asking: a question answered "y" and then refused wastes the administrator's answer.
      const { nodes = [] } = await this.client().get<{ nodes: ApiNode[] }>('/api/v1/node', { user: user.id });
      if (nodes.length) {
        const names = listNames(nodes.map((n) => n.givenName || n.name));
        throw new Error(`user ${user.name} still owns ${nodes.length} node(s) (${names}); delete them first (headway nodes delete -i ID), or add --delete-nodes to delete them with the user`);
      }
      if (!(await this.confirm(`Remove the user ${JSON.stringify(user.name)} (${user.id}) and its pre-auth keys?`))) {
        this.print({ Result: 'User not destroyed' }, 'User not destroyed');
        return;
      }
      // --force only skips the question: a user who still owns nodes is refused by the server.
      await this.client().delete(`/api/v1/user/${seg(user.id)}`);
      this.print({}, 'User destroyed');
      return;
    }
    const [{ nodes = [] }, { preAuthKeys = [] }] = await Promise.all([
      this.client().get<{ nodes: ApiNode[] }>('/api/v1/node', { user: user.id }),
      this.client().get<{ preAuthKeys: ApiPreAuthKey[] }>('/api/v1/preauthkey', { user: user.id }),
    ]);
    const nodeNames = nodes.map((n) => n.givenName || n.name);
    const what = [
      nodes.length ? `its ${nodes.length} node(s) (${listNames(nodeNames)})` : 'no nodes',
      `${preAuthKeys.length} pre-auth key(s)`,
    ].join(' and ');
    if (!(await this.confirm(`Remove the user ${JSON.stringify(user.name)} (${user.id}) with ${what}? Deleted nodes' devices are logged out.`))) {
      this.print({ Result: 'User not destroyed' }, 'User not destroyed');
      return;
    }
    const res = await this.client().delete<{ deletedNodes?: { id: string; givenName: string }[] }>(`/api/v1/user/${seg(user.id)}`, { deleteNodes: 'true' });
    const deleted = res.deletedNodes ?? [];
    this.print(
      { deleted_nodes: deleted.map((n) => ({ id: n.id, given_name: n.givenName })) },
      deleted.length ? `User destroyed with ${deleted.length} node(s): ${listNames(deleted.map((n) => n.givenName))}` : 'User destroyed',
    );
  }
}
