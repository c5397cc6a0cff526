import { Flags } from '@oclif/core';
import { HeadwayCommand, idFlag, commandAliases, requireOneOf, resolveUser, seg } from '@headway/cli';

export default class UsersDestroy extends HeadwayCommand {
  static override summary = 'Destroy a user and its pre-auth keys (refused while it owns nodes)';
  static override hiddenAliases = commandAliases('users', 'destroy', ['delete']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to destroy' }),
    name: Flags.string({ char: 'n', description: 'name of the user (instead of --identifier)' }),
  };

  static override examples = ['<%= config.bin %> users destroy --name alice', '<%= config.bin %> users destroy -i 3 --force'];

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersDestroy);
    requireOneOf(flags, ['identifier', 'name']);
    const user = await resolveUser(this.client(), flags.identifier, flags.name);
    if (!(await this.confirm(`Remove the user ${JSON.stringify(user.name)} (${user.id}) and its pre-auth keys?`))) {
      this.print({ Result: 'User not destroyed' }, 'User not destroyed');
      return;
    }
    // --force only skips the question: a user who still owns nodes is refused by the server.
    await this.client().delete(`/api/v1/user/${seg(user.id)}`);
    this.print({}, 'User destroyed');
  }
}
