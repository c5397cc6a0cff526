import { GLOBAL_FLAGS, HeadwayCommand } from '../base.js';
import { buildInfo, CLI_ROOT } from '../build-info.js';

export default class Version extends HeadwayCommand {
  static override summary = 'Print the headway version, the commit it was built from and the runtime';
  static override examples = ['<%= config.bin %> version', '<%= config.bin %> version -o json'];
  static override baseFlags = { output: GLOBAL_FLAGS.output };

  async run(): Promise<void> {
    await this.parse(Version);
    const { version, commit } = buildInfo(CLI_ROOT);
    const runtime = { node: process.version, platform: process.platform, arch: process.arch };
    this.print({ version, commit, ...runtime }, [
      `headway ${version}`,
      `commit: ${commit}`,
      `runtime: node ${runtime.node} (${runtime.platform}/${runtime.arch})`,
    ].join('\n'));
  }
}
