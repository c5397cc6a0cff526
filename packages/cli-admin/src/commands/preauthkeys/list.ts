import { Flags } from '@oclif/core';
import { HeadwayCommand, type ApiPreAuthKey, preAuthKeyJson, preAuthKeysTable, commandAliases } from '@headway/cli';

export default class PreAuthKeysList extends HeadwayCommand {
  static override summary = 'List pre-auth keys';
  static override hiddenAliases = commandAliases('preauthkeys', 'list', ['ls', 'show']);
  static override flags = {
    user: Flags.string({ char: 'u', description: 'only keys of this user (id or name)' }),
  };

  static override examples = ['<%= config.bin %> preauthkeys list', '<%= config.bin %> preauthkeys list --user alice -o json'];

  async run(): Promise<void> {
    const { flags } = await this.parse(PreAuthKeysList);
    const { preAuthKeys = [] } = await this.client().get<{ preAuthKeys: ApiPreAuthKey[] }>('/api/v1/preauthkey', { user: flags.user });
    this.print(preAuthKeys.map(preAuthKeyJson), () => preAuthKeysTable(preAuthKeys));
  }
}
