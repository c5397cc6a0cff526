import { HeadwayCommand, durationFlag, commandAliases, expiresAt } from '@headway/cli';

export default class ApiKeysCreate extends HeadwayCommand {
  static override summary = 'Create an API key (printed once; use it as cli.api_key on remote machines)';
  static override hiddenAliases = commandAliases('apikeys', 'create', ['c', 'new']);
  static override flags = {
    expiration: durationFlag({ char: 'e', description: 'how long the key stays valid (e.g. 30m, 24h, 90d, 87600h)', default: '90d' }),
  };

  static override examples = ['<%= config.bin %> apikeys create', '<%= config.bin %> apikeys create --expiration 30d'];

  async run(): Promise<void> {
    const { flags } = await this.parse(ApiKeysCreate);
    const { apiKey } = await this.client().post<{ apiKey: string }>('/api/v1/apikey', { expiration: expiresAt(flags.expiration) });
    this.print(apiKey, apiKey);
  }
}
