import { HeadwayCommand, commandAliases } from '@headway/cli';

export default class PolicyGet extends HeadwayCommand {
  static override summary = 'Print the policy in effect';
  static override hiddenAliases = commandAliases('policy', 'get', ['show', 'view', 'fetch']);
  static override examples = ['<%= config.bin %> policy get', '<%= config.bin %> policy get > policy.hujson'];

  async run(): Promise<void> {
    await this.parse(PolicyGet);
    const res = await this.client().get<{ policy: string; updatedAt?: string | null; mode?: string }>('/api/v1/policy');
    // An empty answer is not an empty policy: with none set, the server allows all traffic.
    const human = res.policy ? res.policy : `No policy is set (policy.mode: ${res.mode ?? 'unknown'}): all traffic between devices is allowed.`;
    this.print({ policy: res.policy, updated_at: res.updatedAt ?? null, mode: res.mode ?? null }, human);
  }
}
