import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, type ApiUser, userJson, commandAliases } from '@headway/cli';

export default class UsersCreate extends HeadwayCommand {
  static override summary = 'Create a user';
  static override hiddenAliases = commandAliases('users', 'create', ['c', 'new']);
  static override args = { name: Args.string({ description: 'user name', required: true }) };
  static override flags = {
    'display-name': Flags.string({ char: 'd', description: 'display name' }),
    email: Flags.string({ char: 'e', description: 'e-mail address' }),
  };

  static override examples = [
    '<%= config.bin %> users create alice',
    '<%= config.bin %> users create alice --display-name \'Alice Liddell\' --email alice@example.com',
  ];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(UsersCreate);
    const body: Record<string, string> = { name: args.name };
    if (flags['display-name']) body.displayName = flags['display-name'];
    if (flags.email) body.email = flags.email;
    const { user } = await this.client().post<{ user: ApiUser }>('/api/v1/user', body);
    this.print(userJson(user), 'User created');
  }
}
