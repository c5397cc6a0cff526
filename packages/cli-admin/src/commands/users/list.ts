import { Flags } from '@oclif/core';
import { HeadwayCommand, idFlag, type ApiUser, userJson, usersTable, commandAliases } from '@headway/cli';

export default class UsersList extends HeadwayCommand {
  static override summary = 'List users';
  static override hiddenAliases = commandAliases('users', 'list', ['ls', 'show']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'only the user with this id' }),
    name: Flags.string({ char: 'n', description: 'only the user with this name' }),
    email: Flags.string({ char: 'e', description: 'only users with this e-mail' }),
  };

  static override examples = ['<%= config.bin %> users list', '<%= config.bin %> users list --name alice -o json'];

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersList);
    const { users = [] } = await this.client().get<{ users: ApiUser[] }>('/api/v1/user', {
      id: flags.identifier,
      name: flags.name,
      email: flags.email,
    });
    this.print(users.map(userJson), () => usersTable(users));
  }
}
