import { HeadwayCommand, commandAliases } from '@headway/cli';

export default class NodesBackfillIps extends HeadwayCommand {
  static override summary = 'Give every node an address of each enabled family, and drop addresses of disabled ones';
  static override hiddenAliases = commandAliases('nodes', 'backfillips');
  static override examples = ['<%= config.bin %> nodes backfillips', '<%= config.bin %> nodes backfillips --force'];

  async run(): Promise<void> {
    await this.parse(NodesBackfillIps);
    if (!(await this.confirm('Assign and remove node IP addresses to match the configured prefixes?'))) {
      this.print({ result: 'No addresses changed' }, 'No addresses changed');
      return;
    }
    const { changes = [] } = await this.client().post<{ changes: string[] }>('/api/v1/node/backfillips');
    this.print({ changes }, () => (changes.length ? changes.join('\n') : 'No changes: every node already has the right addresses'));
  }
}
