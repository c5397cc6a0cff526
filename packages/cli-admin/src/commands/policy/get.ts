import { HeadwayCommand, commandAliases } from '@headway/cli';
import { BYPASS, bypassFlag, withDatabasePolicy } from '../../policy-direct.js';

export default class PolicyGet extends HeadwayCommand {
  static override summary = 'Print the policy in effect';
  static override hiddenAliases = commandAliases('policy', 'get', ['show', 'view', 'fetch']);
  static override flags = { ...bypassFlag };
  static override examples = ['<%= config.bin %> policy get', '<%= config.bin %> policy get > policy.hujson', `<%= config.bin %> policy get --${BYPASS}`];

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicyGet);
    const res = flags[BYPASS]
      ? await withDatabasePolicy(this.configPath, async (p) => {
        const r = await p.get();
        return { policy: r?.text ?? '', updatedAt: r?.updatedAt.toISOString() ?? null, mode: 'database' };
      })
      : await this.client().get<{ policy: string; updatedAt?: string | null; mode?: string }>('/api/v1/policy');
    // An empty answer is not an empty policy: with none set, the server allows all traffic.
    const human = res.policy ? res.policy : `No policy is set (policy.mode: ${res.mode ?? 'unknown'}): all traffic between devices is allowed.`;
    this.print({ policy: res.policy, updated_at: res.updatedAt ?? null, mode: res.mode ?? null }, human);
  }
}
