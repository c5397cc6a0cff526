import { Flags } from '@oclif/core';
import { ApiError, ConnectionError, HeadwayCommand } from '@headway/cli';

/**
 * Hello greets and reports the server's health. Extending HeadwayCommand gives it the
 * global -c/-o/--force flags, the exit codes, and a client that reaches the server the
 * same way every built-in command does (local socket, or cli.address with an API key).
 */
export default class Hello extends HeadwayCommand {
  static override summary = "Say hello and show the server's health";
  static override flags = {
    name: Flags.string({ char: 'n', description: 'who to greet', default: 'world' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(Hello);
    const greeting = `Hello, ${flags.name}!`;
    let health: string;
    try {
      const res = await this.client().get<{ databaseConnectivity?: boolean }>('/api/v1/health');
      health = res.databaseConnectivity ? 'healthy' : 'database unreachable';
    } catch (e) {
      // The greeting works without a server; only say why the health is unknown.
      if (!(e instanceof ConnectionError || e instanceof ApiError)) throw e;
      health = `unknown (${e.message})`;
    }
    this.print({ greeting, server: health }, `${greeting}\nserver: ${health}`);
  }
}
