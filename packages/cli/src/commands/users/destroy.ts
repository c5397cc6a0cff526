import { Flags } from '@oclif/core';
import { HeadwayCommand, idFlag } from '../../base.js';
import { commandAliases, requireOneOf, resolveUser, seg } from '../../topics.js';

export default class UsersDestroy extends HeadwayCommand {
  static override summary = 'Destroy a user (with --force, also its nodes and keys)';
  static override hiddenAliases = commandAliases('users', 'destroy', ['delete']);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to destroy' }),
    name: Flags.string({ char: 'n', description: 'name of the user (instead of --identifier)' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersDestroy);
    requireOneOf(flags, ['identifier', 'name']);
    const user = await resolveUser(this.client(), flags.identifier, flags.name);
    await this.confirm(`Remove the user ${JSON.stringify(user.name)} (${user.id}) and its pre-auth keys?`);
    await this.client().delete(`/api/v1/user/${seg(user.id)}`, { force: this.force ? 'true' : undefined });
    this.print({}, 'User destroyed');
  }
}
