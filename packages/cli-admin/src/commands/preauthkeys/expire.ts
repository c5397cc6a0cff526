import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, idFlag, type ApiPreAuthKey, preAuthKeyJson, commandAliases } from '@headway/cli';
import { preAuthKeyId } from '../../preauthkey-target.js';

export default class PreAuthKeysExpire extends HeadwayCommand {
  static override summary = 'Expire a pre-auth key';
  static override hiddenAliases = commandAliases('preauthkeys', 'expire', ['revoke', 'exp', 'e']);
  static override args = { key: Args.string({ description: 'the key or its prefix (instead of --id)' }) };
  static override flags = {
    id: idFlag({ char: 'i', description: 'id of the key' }),
    user: Flags.string({ char: 'u', description: 'with KEY: the user that owns it' }),
  };

  static override examples = [
    '<%= config.bin %> preauthkeys expire --id 4',
    '<%= config.bin %> preauthkeys expire abcd1234efgh --user alice',
  ];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(PreAuthKeysExpire);
    const id = await preAuthKeyId(() => this.client(), flags.id, args.key, flags.user);
    const { preAuthKey } = await this.client().post<{ preAuthKey?: ApiPreAuthKey }>('/api/v1/preauthkey/expire', { id });
    this.print(preAuthKey ? preAuthKeyJson(preAuthKey) : {}, 'Key expired');
  }
}
