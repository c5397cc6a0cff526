import { Flags } from '@oclif/core';
import { HeadwayCommand, idFlag, type ApiUser, userJson, commandAliases, requireOneOf, resolveUser, seg } from '@headway/cli';

export default class UsersLink extends HeadwayCommand {
  static override summary = 'Link a user to an identity-provider identity (its next login through the provider lands on this user)';
  static override description = 'The subject is the provider\'s stable id for the person (the `sub` claim). The issuer defaults to oidc.issuer of the server.';
  static override examples = ['<%= config.bin %> users link -i 3 --subject 248289761001', '<%= config.bin %> users link -n alice --subject 248289761001 --issuer https://idp.example.com'];
  static override hiddenAliases = commandAliases('users', 'link', []);
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the user to link' }),
    name: Flags.string({ char: 'n', description: 'name of the user (instead of --identifier)' }),
    subject: Flags.string({ char: 's', description: 'the provider\'s subject (sub claim) of the person', required: true }),
    issuer: Flags.string({ description: 'issuer URL (default: the server\'s oidc.issuer)' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(UsersLink);
    requireOneOf(flags, ['identifier', 'name']);
    const id = flags.identifier ?? (await resolveUser(this.client(), undefined, flags.name)).id;
    const body: Record<string, string> = { subject: flags.subject };
    if (flags.issuer) body.issuer = flags.issuer;
    const { user } = await this.client().post<{ user: ApiUser }>(`/api/v1/user/${seg(String(id))}/link`, body);
    this.print(userJson(user), `User ${user.name} linked to ${user.providerId}`);
  }
}
