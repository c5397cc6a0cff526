import { Flags } from '@oclif/core';
import { HeadwayCommand, serialize, commandAliases } from '@headway/cli';
import { PolicyInvalid, asPolicyInvalid, checkPolicyOffline, readPolicyFile, renderPolicyErrors } from '../../policy-check.js';
import { BYPASS, bypassFlag, withDatabasePolicy } from '../../policy-direct.js';

export default class PolicySet extends HeadwayCommand {
  static override summary = 'Replace the policy (database policy mode)';
  static override hiddenAliases = commandAliases('policy', 'set', ['put', 'update']);
  static override flags = {
    file: Flags.string({ char: 'f', description: 'policy file (HuJSON)', required: true }),
    ...bypassFlag,
  };

  static override examples = ['<%= config.bin %> policy set -f policy.hujson'];

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicySet);
    const text = readPolicyFile(flags.file);
    let res: { policy: string; updatedAt?: string; warnings?: string[] };
    try {
      res = flags[BYPASS]
        ? await this.setDirectly(text, flags.file)
        : await this.client().put<{ policy: string; updatedAt?: string; warnings?: string[] }>('/api/v1/policy', { policy: text });
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

  /** setDirectly checks the policy offline (no users or devices to check it against), then stores it in the database. */
  private async setDirectly(text: string, file: string): Promise<{ policy: string; updatedAt?: string; warnings?: string[] }> {
    const warnings = checkPolicyOffline(text, file);
    const stored = await withDatabasePolicy(this.configPath, (p) => p.set(text));
    return { policy: stored.text, updatedAt: stored.updatedAt.toISOString(), warnings };
  }
}
