import { Flags } from '@oclif/core';
import { HeadwayCommand, type ApiNode, nodeJson, authIdFlag, commandAliases } from '@headway/cli';

export default class AuthRegister extends HeadwayCommand {
  static override summary = 'Register a device waiting at its login URL to a user';
  static override description = 'The auth ID is the last part of the URL `tailscale up` printed (the register page shows the whole command).';
  static override hiddenAliases = commandAliases('auth', 'register');
  static override examples = ['<%= config.bin %> auth register --auth-id Ab3dEf9hIjKlMnOpQrStUvWx --user alice'];
  static override flags = {
    'auth-id': authIdFlag({ description: 'ID of the pending login (the end of its URL)', required: true }),
    user: Flags.string({ char: 'u', description: 'user (name or id) that will own the device', required: true }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(AuthRegister);
    const { node } = await this.client().post<{ node: ApiNode }>('/api/v1/auth/register', { authId: flags['auth-id'], user: flags.user });
    this.print(nodeJson(node), `Node ${node.givenName || node.name} registered`);
  }
}
