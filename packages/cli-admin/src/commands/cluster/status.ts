import { HeadwayCommand, commandAliases, formatTime, renderTable, type components } from '@headway/cli';

type ClusterInstance = components['schemas']['ClusterInstance'];

export default class ClusterStatus extends HeadwayCommand {
  static override summary = 'List the instances sharing the database (cluster.enabled): address, map sessions, last heartbeat';
  static override hiddenAliases = commandAliases('cluster', 'status', ['list', 'ls', 'show']);
  static override examples = ['<%= config.bin %> cluster status', '<%= config.bin %> cluster status -o json'];

  async run(): Promise<void> {
    await this.parse(ClusterStatus);
    const { enabled, instances } = await this.client().get<{ enabled: boolean; instances: ClusterInstance[] }>('/api/v1/cluster');
    const human = () => (enabled
      ? renderTable(
        ['ID', 'Address', 'Sessions', 'Last heartbeat', 'Started', 'State'],
        instances.map((i) => [
          i.id, i.address, String(i.sessions), formatTime(i.heartbeat), formatTime(i.startedAt),
          [i.live ? 'live' : 'dead', ...(i.self ? ['this one'] : []), ...(i.jobs ? ['runs jobs'] : [])].join(', '),
        ]),
      )
      : 'This server runs alone (cluster.enabled: false).');
    this.print({
      enabled,
      instances: instances.map((i) => ({
        id: i.id, address: i.address, sessions: i.sessions, heartbeat: i.heartbeat, started_at: i.startedAt, live: i.live, self: i.self, jobs: i.jobs,
      })),
    }, human);
  }
}
