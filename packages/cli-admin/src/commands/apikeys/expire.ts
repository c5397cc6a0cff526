import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, idFlag, commandAliases } from '@headway/cli';

export default class ApiKeysExpire extends HeadwayCommand {
  static override summary = 'Expire (revoke) an API key';
  static override hiddenAliases = commandAliases('apikeys', 'expire', ['revoke', 'exp', 'e']);
  static override args = { prefix: Args.string({ name: 'KEY_ID', description: 'the key prefix (instead of --prefix)' }) };
  static override flags = {
    prefix: Flags.string({ char: 'p', description: 'prefix of the key' }),
    id: idFlag({ char: 'i', description: 'id of the key' }),
  };

  static override examples = ['<%= config.bin %> apikeys expire --prefix abcd1234efgh', '<%= config.bin %> apikeys expire --id 3'];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(ApiKeysExpire);
    const given = [flags.prefix, args.prefix, flags.id].filter((v) => v !== undefined && v !== '');
    if (given.length === 0) throw new UsageError('pass --prefix PREFIX, --id ID or the prefix as an argument');
    if (given.length > 1) throw new UsageError('pass only one of --prefix, --id or a prefix argument');
    const prefix = flags.prefix || args.prefix;
    await this.client().post('/api/v1/apikey/expire', prefix ? { prefix } : { id: flags.id });
    this.print({}, 'Key expired');
  }
}
