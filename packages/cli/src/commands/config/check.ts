import { checkPlugins, formatProblem, loadConfig } from '@headway/core/ports';
import { GLOBAL_FLAGS, HeadwayCommand, boolFlag } from '../../base.js';

export default class ConfigCheck extends HeadwayCommand {
  static override summary = 'Check the config file and environment (no server needed)';
  static override description = 'Errors exit 1. A headscale key Headway accepts but does not implement (database.gorm.*, logtail.enabled, ...) is a warning naming it; with --strict it is an error.';
  static override hiddenAliases = ['configtest'];
  static override examples = ['<%= config.bin %> config check', '<%= config.bin %> config check -c /etc/headway/config.yaml', '<%= config.bin %> config check --strict', '<%= config.bin %> config check -o json'];
  static override baseFlags = { config: GLOBAL_FLAGS.config, output: GLOBAL_FLAGS.output };
  static override flags = {
    strict: boolFlag({ description: 'treat keys that are accepted for headscale compatibility but not implemented as errors' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(ConfigCheck);
    const { config, source, problems } = loadConfig(this.configPath ? { path: this.configPath } : {});
    // Each plugin checks its own options, as it would at start-up.
    problems.push(...await checkPlugins(config.plugins));
    if (flags.strict) for (const p of problems) if (p.code === 'not_implemented') p.level = 'error';
    const failing = problems.filter((p) => p.level !== 'warn');
    if (this.outputFormat) {
      this.print({ valid: failing.length === 0, source, problems }, '');
    } else {
      for (const p of problems) {
        process.stdout.write(`${p.level === 'warn' ? 'warning' : p.level}: ${formatProblem(p)}\n`);
      }
      if (failing.length === 0) {
        process.stdout.write(source ? `Config is valid (${source})\n` : 'Config is valid (no config file found; built-in defaults)\n');
      }
    }
    if (failing.length) process.exitCode = 1;
  }
}
