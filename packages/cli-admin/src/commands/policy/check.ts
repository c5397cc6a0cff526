import { Flags } from '@oclif/core';
import { HeadwayCommand, serialize, ConnectionError, commandAliases } from '@headway/cli';
import { PolicyInvalid, asPolicyInvalid, checkPolicyOffline, readPolicyFile, renderPolicyErrors } from '../../policy-check.js';
import { BYPASS, bypassFlag, withDatabasePolicy } from '../../policy-direct.js';

export default class PolicyCheck extends HeadwayCommand {
  static override summary = 'Check a policy file (against the server, or offline when none is reachable)';
  static override hiddenAliases = commandAliases('policy', 'check');
  static override flags = {
    file: Flags.string({ char: 'f', description: "policy file (HuJSON); default: the server's current policy" }),
    ...bypassFlag,
  };

  static override examples = ['<%= config.bin %> policy check -f policy.hujson', '<%= config.bin %> policy check'];

  async run(): Promise<void> {
    const { flags } = await this.parse(PolicyCheck);
    let warnings: string[];
    let checkedBy: 'server' | 'offline' = 'server';
    try {
      if (flags[BYPASS]) {
        // Without the server: the file, or the policy stored in the database, checked offline.
        checkedBy = 'offline';
        const text = flags.file ? readPolicyFile(flags.file) : await withDatabasePolicy(this.configPath, async (p) => (await p.get())?.text ?? '');
        if (text === '') {
          this.print({ valid: true, warnings: [], checked_by: checkedBy, policy_set: false }, 'No policy is set: all traffic between devices is allowed.');
          return;
        }
        warnings = checkPolicyOffline(text, flags.file ?? 'the stored policy');
      } else if (flags.file) {
        const text = readPolicyFile(flags.file);
        try {
          ({ warnings } = await this.serverCheck(text));
        } catch (e) {
          if (!(e instanceof ConnectionError)) throw e;
          // Without a server the syntax and self-consistency can still be checked;
          // only checks against live users and devices are skipped.
          process.stderr.write(`note: ${e.message}; checking offline (users and devices are not verified)\n`);
          checkedBy = 'offline';
          warnings = checkPolicyOffline(text, flags.file);
        }
      } else {
        const text = (await this.client().get<{ policy: string }>('/api/v1/policy')).policy ?? '';
        if (text === '') {
          // Nothing to check: without a policy the server allows all traffic.
          this.print({ valid: true, warnings: [], checked_by: checkedBy, policy_set: false }, 'No policy is set: all traffic between devices is allowed.');
          return;
        }
        ({ warnings } = await this.serverCheck(text));
      }
    } catch (e) {
      const invalid = asPolicyInvalid(e);
      if (!(invalid instanceof PolicyInvalid)) throw e;
      // Every error at once, one per line: a broken file is fixed in one round.
      if (this.outputFormat) process.stdout.write(serialize({ valid: false, errors: invalid.errors, checked_by: checkedBy }, this.outputFormat));
      else process.stderr.write(renderPolicyErrors(invalid.errors));
      process.exitCode = 1;
      return;
    }
    this.print({ valid: true, warnings, checked_by: checkedBy }, () => ['Policy is valid', ...warnings.map((w) => `warning: ${w}`)].join('\n'));
  }

  private async serverCheck(text: string): Promise<{ warnings: string[] }> {
    const res = await this.client().post<{ valid?: boolean; warnings?: string[] }>('/api/v1/policy/check', { policy: text });
    return { warnings: res.warnings ?? [] };
  }
}
