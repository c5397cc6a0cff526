import { Args, Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, type ApiUser, userJson, commandAliases } from '@headway/cli';

/** checkPictureUrl refuses anything but an http(s) URL before it is sent (the server checks again). */
function checkPictureUrl(value: string): string {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new UsageError(`--picture-url: ${JSON.stringify(value)} is not an http:// or https:// URL`);
  }
  return value;
}

export default class UsersCreate extends HeadwayCommand {
  static override summary = 'Create a user';
  static override hiddenAliases = commandAliases('users', 'create', ['c', 'new']);
  static override args = { name: Args.string({ description: 'user name', required: true }) };
  static override flags = {
    'display-name': Flags.string({ char: 'd', description: 'display name' }),
    email: Flags.string({ char: 'e', description: 'e-mail address' }),
    'picture-url': Flags.string({ char: 'p', description: 'profile picture URL (http or https)' }),
  };

  static override examples = [
    '<%= config.bin %> users create alice',
    '<%= config.bin %> users create alice --display-name \'Alice Liddell\' --email alice@example.com',
    '<%= config.bin %> users create alice --picture-url https://example.com/alice.png',
  ];

  async run(): Promise<void> {
    const { args, flags } = await this.parse(UsersCreate);
    const body: Record<string, string> = { name: args.name };
    if (flags['display-name']) body.displayName = flags['display-name'];
    if (flags.email) {
      if (!/^[^\s@]+@[^\s@]+$/.test(flags.email)) throw new UsageError(`--email: ${JSON.stringify(flags.email)} is not an e-mail address (e.g. alice@example.com)`);
      body.email = flags.email;
    }
    if (flags['picture-url']) body.pictureUrl = checkPictureUrl(flags['picture-url']);
    const { user } = await this.client().post<{ user: ApiUser }>('/api/v1/user', body);
    this.print(userJson(user), 'User created');
  }
}
