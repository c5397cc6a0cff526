import { HeadwayCommand, type ApiKeyInfo, apiKeyJson, apiKeysTable, commandAliases } from '@headway/cli';

export default class ApiKeysList extends HeadwayCommand {
  static override summary = 'List API keys (prefixes only; secrets are never shown again)';
  static override hiddenAliases = commandAliases('apikeys', 'list', ['ls', 'show']);
  static override examples = ['<%= config.bin %> apikeys list', '<%= config.bin %> apikeys list -o json'];

  async run(): Promise<void> {
    await this.parse(ApiKeysList);
    const { apiKeys = [] } = await this.client().get<{ apiKeys: ApiKeyInfo[] }>('/api/v1/apikey');
    this.print(apiKeys.map(apiKeyJson), () => apiKeysTable(apiKeys));
  }
}
