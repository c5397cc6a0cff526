import { GLOBAL_FLAGS, HeadwayCommand } from '../base.js';

export default class Health extends HeadwayCommand {
  static override summary = "Check the server's health (database connectivity)";
  static override examples = ['<%= config.bin %> health', '<%= config.bin %> health -o json'];
  static override baseFlags = { config: GLOBAL_FLAGS.config, output: GLOBAL_FLAGS.output };

  async run(): Promise<void> {
    await this.parse(Health);
    const res = await this.client().get<{ databaseConnectivity?: boolean }>('/api/v1/health');
    const ok = res.databaseConnectivity === true;
    this.print({ database_connectivity: ok }, ok ? 'OK: database reachable' : 'NOT OK: database unreachable');
    if (!ok) process.exitCode = 1;
  }
}
