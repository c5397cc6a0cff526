import { Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, idFlag, type ApiUser, userJson, commandAliases, requireOneOf, resolveUser, seg } from '@headway/cli';

export default class UsersRename extends HeadwayCommand {
  static override summary = 'Rename a user';
  static override hiddenAliases = commandAliases('users', 'rename', ['mv']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to rename' }),
    name: Flags.string({ char: 'n', description: 'current name of the user (instead of --identifier)' }),
    'new-name': Flags.string({ char: 'r', description: 'new user name', required: true }),
  };

  static override examples = [
    '<%= config.bin %> users rename --name alice --new-name alice2',
    '<%= config.bin %> users rename -i 3 -r alice2',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersRename);
    requireOneOf(flags, ['identifier', 'name']);
    if (!flags['new-name'].trim()) throw new UsageError('--new-name: give the new name (it is empty)');
    const id = flags.identifier ?? (await resolveUser(this.client(), undefined, flags.name)).id;
    const { user } = await this.client().post<{ user: ApiUser }>(`/api/v1/user/${seg(id)}/rename/${seg(flags['new-name'])}`);
    this.print(userJson(user), 'User renamed');
  }
}
