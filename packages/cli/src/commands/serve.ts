import { GLOBAL_FLAGS, HeadwayCommand } from '../base.js';
import { runServe } from '../serve-main.js';

export default class Serve extends HeadwayCommand {
  static override summary = 'Run the coordination server';
  static override examples = [
    { description: 'Serve with the first config file found ($HEADWAY_CONFIG, /etc/headway/config.yaml, ...)', command: '<%= config.bin %> serve' },
    { description: 'Serve with a given config file', command: '<%= config.bin %> serve -c /etc/headway/config.yaml' },
  ];
  // Only -c concerns the server: it prints no -o output and asks no questions.
  static override baseFlags = { config: GLOBAL_FLAGS.config };

  async run(): Promise<void> {
    await this.parse(Serve);
    await runServe(this.configPath);
  }
}
