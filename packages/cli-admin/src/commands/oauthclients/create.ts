import { Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, commandAliases, listFlag, splitList, type ApiOAuthClient } from '@headway/cli';
import { oauthClientJson } from '../../oauth-clients-format.js';

export default class OAuthClientsCreate extends HeadwayCommand {
  static override summary = 'Create an OAuth client for /api/v2 (its secret is printed once)';
  static override description = 'The client gets access tokens at /api/v2/oauth/token (client-credentials grant), as the Tailscale '
    + 'Terraform provider, Kubernetes operator and Go client do. Scopes auth_keys and devices:core need --tag: the keys the client '
    + 'creates may carry only its tags.';
  static override hiddenAliases = commandAliases('oauthclients', 'create', ['c', 'new']);
  static override flags = {
    scope: listFlag({ char: 's', description: "scopes (comma-separated or repeated), Tailscale's names: all, all:read, devices:core, auth_keys, dns:read, ..." }),
    tag: listFlag({ char: 't', description: 'tags the keys it creates may carry (comma-separated or repeated)' }),
    description: Flags.string({ char: 'd', description: 'what the client is for' }),
  };

  static override examples = [
    '<%= config.bin %> oauthclients create --scope auth_keys,devices:core --tag tag:k8s-operator --description "kubernetes operator"',
    '<%= config.bin %> oauthclients create --scope all:read -o json',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(OAuthClientsCreate);
    const scopes = splitList(flags.scope);
    if (!scopes.length) throw new UsageError('pass at least one --scope (e.g. --scope auth_keys,devices:core --tag tag:ci)');
    const { oauthClient, secret } = await this.client().post<{ oauthClient: ApiOAuthClient; secret: string }>('/api/v1/oauthclient', {
      scopes, tags: splitList(flags.tag), description: flags.description,
    });
    this.print({ ...oauthClientJson(oauthClient), secret }, [
      `Client ID:     ${oauthClient.id}`,
      `Client secret: ${secret}`,
      'The secret is shown only now.',
    ].join('\n'));
  }
}
