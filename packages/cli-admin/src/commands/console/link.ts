import { userInfo } from 'node:os';
import { Flags } from '@oclif/core';
import { HeadwayCommand, UsageError, formatTime } from '@headway/cli';

export default class ConsoleLink extends HeadwayCommand {
  static override summary = 'Print a one-time sign-in link to the admin console (over the admin socket only)';
  static override description = 'The link works once, within admin.link_lifetime (10 minutes by default), and signs in as --as '
    + '(the audit log records the console\'s changes as console:<name>). Only the server\'s admin socket makes links: run this on the host.';
  static override flags = {
    as: Flags.string({ description: 'the name the sign-in is recorded under (default: this account\'s user name)' }),
  };

  static override examples = ['<%= config.bin %> console link', '<%= config.bin %> console link --as alice'];

  async run(): Promise<void> {
    const { flags } = await this.parse(ConsoleLink);
    const client = this.client();
    if (client.target.kind !== 'socket') throw new UsageError('console link needs the admin socket (unix_socket): run it on the server\'s host, without cli.address (HEADWAY_CLI_ADDRESS)');
    const admin = flags.as ?? userInfo().username;
    const link = await client.request<{ url: string; expiresAt: string }>('POST', '/api/v1/console/link', { admin });
    this.print({ url: link.url, expiresAt: link.expiresAt }, () => `${link.url}\n(works once, until ${formatTime(link.expiresAt)})`);
  }
}
