import { HeadwayCommand, authIdFlag, commandAliases } from '@headway/cli';

export default class AuthReject extends HeadwayCommand {
  static override summary = 'Reject a pending login (the device is told its login was rejected)';
  static override hiddenAliases = commandAliases('auth', 'reject');
  static override examples = ['<%= config.bin %> auth reject --auth-id Ab3dEf9hIjKlMnOpQrStUvWx'];
  static override flags = {
    'auth-id': authIdFlag({ description: 'ID of the pending login (the end of its URL)', required: true }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(AuthReject);
    await this.client().post('/api/v1/auth/reject', { authId: flags['auth-id'] });
    this.print({}, 'Auth request rejected');
  }
}
