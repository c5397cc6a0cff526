import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, idFlag, commandAliases } from '@headway/cli';
import { preAuthKeyId } from '../../preauthkey-target.js';

export default class PreAuthKeysDelete extends HeadwayCommand {
  static override summary = 'Delete a pre-auth key';
  static override hiddenAliases = commandAliases('preauthkeys', 'delete', ['del', 'rm', 'd']);
  static override args = { key: Args.string({ description: 'the key or its prefix (instead of --id)' }) };
  static override flags = {
    id: idFlag({ char: 'i', description: 'id of the key' }),
    user: Flags.string({ char: 'u', description: 'with KEY: the user that owns it' }),
  };

  static override examples = [
    '<%= config.bin %> preauthkeys delete --id 4',
    '<%= config.bin %> preauthkeys delete abcd1234efgh --user alice',
  ];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(PreAuthKeysDelete);
    const id = await preAuthKeyId(() => this.client(), flags.id, args.key, flags.user);
    await this.client().delete('/api/v1/preauthkey', { id });
    this.print({}, 'Key deleted');
  }
}
