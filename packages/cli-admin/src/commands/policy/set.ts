import { Flags } from '@oclif/core';
import { HeadwayCommand, serialize, commandAliases } from '@headway/cli';
import { PolicyInvalid, asPolicyInvalid, readPolicyFile, renderPolicyErrors } from '../../policy-check.js';

export default class PolicySet extends HeadwayCommand {
  static override summary = 'Replace the policy (database policy mode)';
  static override hiddenAliases = commandAliases('policy', 'set', ['put', 'update']);
  static override flags = {
    file: Flags.string({ char: 'f', description: 'policy file (HuJSON)', required: true }),
  };

  static override examples = ['<%= config.bin %> policy set -f policy.hujson'];

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicySet);
    const text = readPolicyFile(flags.file);
    let res: { policy: string; updatedAt?: string; warnings?: string[] };
    try {
      res = await this.client().put<{ policy: string; updatedAt?: string; warnings?: string[] }>('/api/v1/policy', { policy: text });
    } catch (e) {
      const invalid = asPolicyInvalid(e);
      if (!(invalid instanceof PolicyInvalid)) throw e;
      if (this.outputFormat) process.stdout.write(serialize({ error: invalid.message, errors: invalid.errors }, this.outputFormat));
      else process.stderr.write(renderPolicyErrors(invalid.errors));
      process.exitCode = 1;
      return;
    }
    // The same warnings `policy check` prints: a deny-all policy is applied, but not silently.
    const warnings = res.warnings ?? [];
    this.print({ policy: res.policy, updated_at: res.updatedAt ?? null, warnings }, () => ['Policy updated.', ...warnings.map((w) => `warning: ${w}`)].join('\n'));
  }
}
