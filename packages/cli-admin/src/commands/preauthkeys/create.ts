import { Flags } from '@oclif/core';
import { HeadwayCommand, boolFlag, durationFlag, listFlag, splitList, type ApiPreAuthKey, preAuthKeyJson, checkTags, commandAliases, expiresAt } from '@headway/cli';

export default class PreAuthKeysCreate extends HeadwayCommand {
  static override summary = 'Create a pre-auth key (printed once)';
  static override hiddenAliases = commandAliases('preauthkeys', 'create', ['c', 'new']);
  static override flags = {
    user: Flags.string({ char: 'u', description: 'user (id or name) that will own the nodes; optional for tagged keys' }),
    reusable: boolFlag({ description: 'the key can register more than one node' }),
    ephemeral: boolFlag({ description: 'nodes registered with it are removed when they go offline' }),
    expiration: durationFlag({ char: 'e', description: 'how long the key stays valid (e.g. 30m, 24h, 90d)', default: '1h' }),
    tags: listFlag({ description: 'tags given to the nodes, comma-separated (tag:a,tag:b)' }),
  };

  static override examples = [
    '<%= config.bin %> preauthkeys create --user alice',
    '<%= config.bin %> preauthkeys create --user alice --reusable --expiration 24h',
    '<%= config.bin %> preauthkeys create --tags tag:server --ephemeral',
  ];

  async run(): Promise<void> {
    const { flags } = await this.parse(PreAuthKeysCreate);
    const aclTags = checkTags(splitList(flags.tags));
    const body: Record<string, unknown> = {
      reusable: flags.reusable,
      ephemeral: flags.ephemeral,
      expiration: expiresAt(flags.expiration),
      aclTags,
    };
    if (flags.user !== undefined) body.user = flags.user;
    const { preAuthKey } = await this.client().post<{ preAuthKey: ApiPreAuthKey }>('/api/v1/preauthkey', body);
    this.print(preAuthKeyJson(preAuthKey), preAuthKey.key);
  }
}
