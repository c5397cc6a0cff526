import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, commandAliases, seg } from '@headway/cli';

export default class OAuthClientsDelete extends HeadwayCommand {
  static override summary = 'Delete an OAuth client; its access tokens stop working at once';
  static override hiddenAliases = commandAliases('oauthclients', 'delete', ['remove', 'del', 'revoke']);
  static override args = { id: Args.string({ name: 'CLIENT_ID', description: 'the client id (instead of --id)' }) };
  static override flags = { id: Flags.string({ char: 'i', description: 'id of the client' }) };
  static override examples = ['<%= config.bin %> oauthclients delete --id k3x9q2w7e1r5'];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(OAuthClientsDelete);
    const given = [flags.id, args.id].filter((v) => v !== undefined && v !== '');
    if (given.length !== 1) throw new UsageError(given.length ? 'pass only one of --id or a client id argument' : 'pass --id CLIENT_ID or the client id as an argument');
    await this.client().delete(`/api/v1/oauthclient/${seg(given[0]!)}`);
    this.print({}, 'OAuth client deleted');
  }
}
