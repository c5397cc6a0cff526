import { HeadwayCommand, commandAliases, type ApiOAuthClient } from '@headway/cli';
import { oauthClientJson, oauthClientsTable } from '../../oauth-clients-format.js';

export default class OAuthClientsList extends HeadwayCommand {
  static override summary = 'List the OAuth clients of /api/v2 (secrets are never shown again)';
  static override hiddenAliases = commandAliases('oauthclients', 'list', ['ls', 'show']);
  static override examples = ['<%= config.bin %> oauthclients list', '<%= config.bin %> oauthclients list -o json'];

  async run(): Promise<void> {
    await this.parse(OAuthClientsList);
    const { oauthClients = [] } = await this.client().get<{ oauthClients: ApiOAuthClient[] }>('/api/v1/oauthclient');
    this.print(oauthClients.map(oauthClientJson), () => (oauthClients.length ? oauthClientsTable(oauthClients) : 'No OAuth clients'));
  }
}
