import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, idFlag, type ApiKeyInfo, commandAliases, seg } from '@headway/cli';

export default class ApiKeysDelete extends HeadwayCommand {
  static override summary = 'Delete an API key';
  static override hiddenAliases = commandAliases('apikeys', 'delete', ['remove', 'del']);
  static override args = { prefix: Args.string({ name: 'KEY_ID', description: 'the key prefix (instead of --prefix)' }) };
  static override flags = {
    prefix: Flags.string({ char: 'p', description: 'prefix of the key' }),
    id: idFlag({ char: 'i', description: 'id of the key' }),
  };

  static override examples = ['<%= config.bin %> apikeys delete --prefix abcd1234efgh', '<%= config.bin %> apikeys delete --id 3'];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(ApiKeysDelete);
    const given = [flags.prefix, args.prefix, flags.id].filter((v) => v !== undefined && v !== '');
    if (given.length === 0) throw new UsageError('pass --prefix PREFIX, --id ID or the prefix as an argument');
    if (given.length > 1) throw new UsageError('pass only one of --prefix, --id or a prefix argument');
    let prefix = flags.prefix || args.prefix;
    if (!prefix) {
      // The API deletes by prefix; an id is looked up first.
      const { apiKeys = [] } = await this.client().get<{ apiKeys: ApiKeyInfo[] }>('/api/v1/apikey');
      const key = apiKeys.find((k) => k.id === flags.id);
      if (!key) throw new Error(`no API key with id ${flags.id}`);
      prefix = key.prefix;
    }
    await this.client().delete(`/api/v1/apikey/${seg(prefix)}`);
    this.print({}, 'Key deleted');
  }
}
