import { checkPlugins, formatProblem, loadConfig } from '@headway/core/ports';
import { GLOBAL_FLAGS, HeadwayCommand } from '../../base.js';

export default class ConfigCheck extends HeadwayCommand {
  static override summary = 'Check the config file and environment (no server needed)';
  static override hiddenAliases = ['configtest'];
  static override examples = ['<%= config.bin %> config check', '<%= config.bin %> config check -c /etc/headway/config.yaml', '<%= config.bin %> config check -o json'];
  static override baseFlags = { config: GLOBAL_FLAGS.config, output: GLOBAL_FLAGS.output };

  async run(): Promise<void> {
    await this.parse(ConfigCheck);
    const { config, source, problems } = loadConfig(this.configPath ? { path: this.configPath } : {});
    // Each plugin checks its own options, as it would at start-up.
    problems.push(...await checkPlugins(config.plugins));
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
