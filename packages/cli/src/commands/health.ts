import { HeadwayCommand } from '../base.js';

export default class Health extends HeadwayCommand {
  static override summary = "Check the server's health (database connectivity)";

  async run(): Promise<void> {
    await this.parse(Health);
    const res = await this.client().get<{ databaseConnectivity?: boolean }>('/api/v1/health');
    const ok = res.databaseConnectivity === true;
    this.print({ database_connectivity: ok }, ok ? 'OK: database reachable' : 'NOT OK: database unreachable');
    if (!ok) process.exitCode = 1;
  }
}
