import { HeadwayCommand, type ApiNode, nodeJson, authIdFlag, commandAliases } from '@headway/cli';

export default class AuthApprove extends HeadwayCommand {
  static override summary = 'Approve a pending login of a device already in the network (it keeps its owner)';
  static override description = 'For a re-login (after expiry, logout or --force-reauth). A new device needs an owner: use `auth register --user`.';
  static override hiddenAliases = commandAliases('auth', 'approve');
  static override examples = ['<%= config.bin %> auth approve --auth-id Ab3dEf9hIjKlMnOpQrStUvWx'];
  static override flags = {
    'auth-id': authIdFlag({ description: 'ID of the pending login (the end of its URL)', required: true }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(AuthApprove);
    const { node } = await this.client().post<{ node?: ApiNode }>('/api/v1/auth/approve', { authId: flags['auth-id'] });
    this.print(node ? nodeJson(node) : {}, 'Auth request approved');
  }
}
