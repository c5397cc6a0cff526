import { Flags } from '@oclif/core';
import { HeadwayCommand } from '../../base.js';
import { readPolicyFile } from '../../policy-check.js';
import { commandAliases } from '../../topics.js';

export default class PolicySet extends HeadwayCommand {
  static override summary = 'Replace the policy (database policy mode)';
  static override hiddenAliases = commandAliases('policy', 'set', ['put', 'update']);
  static override flags = {
    file: Flags.string({ char: 'f', description: 'policy file (HuJSON)', required: true }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicySet);
    const text = readPolicyFile(flags.file);
    const res = await this.client().put<{ policy: string; updatedAt?: string }>('/api/v1/policy', { policy: text });
    this.print({ policy: res.policy, updated_at: res.updatedAt ?? null }, 'Policy updated.');
  }
}
