import { Flags } from '@oclif/core';
import { HeadwayCommand, idFlag } from '../../base.js';
import type { ApiUser } from '../../api-types.js';
import { userJson } from '../../format.js';
import { commandAliases, requireOneOf, resolveUser, seg } from '../../topics.js';

export default class UsersRename extends HeadwayCommand {
  static override summary = 'Rename a user';
  static override hiddenAliases = commandAliases('users', 'rename', ['mv']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to rename' }),
    name: Flags.string({ char: 'n', description: 'current name of the user (instead of --identifier)' }),
    'new-name': Flags.string({ char: 'r', description: 'new user name', required: true }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersRename);
    requireOneOf(flags, ['identifier', 'name']);
    const id = flags.identifier ?? (await resolveUser(this.client(), undefined, flags.name)).id;
    const { user } = await this.client().post<{ user: ApiUser }>(`/api/v1/user/${seg(id)}/rename/${seg(flags['new-name'])}`);
    this.print(userJson(user), 'User renamed');
  }
}
