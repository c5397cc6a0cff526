import { Flags } from '@oclif/core';
import { HeadwayCommand, commandAliases, formatTime, renderTable, type components } from '@headway/cli';

type AuditEntry = components['schemas']['AuditEntry'];

export default class AuditList extends HeadwayCommand {
  static override summary = 'Show the audit log: who changed what, when and from where (newest first)';
  static override hiddenAliases = commandAliases('audit', 'list', ['ls', 'show']);
  static override flags = {
    limit: Flags.integer({ char: 'n', description: 'at most this many entries (1-1000)', default: 100, min: 1, max: 1000 }),
    before: Flags.integer({ description: 'only entries older than this id (the last id of the previous page)', min: 1 }),
    actor: Flags.string({ description: 'only changes by this actor (apikey:<prefix>, oauth:<client id>, socket)' }),
    action: Flags.string({ description: 'only this operation (renameNode, SetPolicy, ...)' }),
  };

  static override examples = ['<%= config.bin %> audit list', '<%= config.bin %> audit list --actor apikey:0123456789ab -n 20 -o json'];

  async run(): Promise<void> {
    const { flags } = await this.parse(AuditList);
    const { entries, persistent } = await this.client().get<{ entries: AuditEntry[]; persistent: boolean }>('/api/v1/audit', {
      limit: String(flags.limit), before: flags.before === undefined ? undefined : String(flags.before), actor: flags.actor, action: flags.action,
    });
    const human = () => {
      const table = renderTable(['ID', 'When', 'Actor', 'Action', 'Target', 'From'], entries.map((e) => [e.id, formatTime(e.at), e.actor, e.action, e.target, e.remote]));
      return persistent ? table : `${table}\n(the database keeps no audit log: these entries live in the server's memory until it restarts)`;
    };
    this.print(entries.map((e) => ({ id: Number(e.id), at: e.at, actor: e.actor, action: e.action, target: e.target, remote: e.remote })), human);
  }
}
