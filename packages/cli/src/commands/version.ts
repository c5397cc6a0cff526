import { readFileSync } from 'node:fs';
import { HeadwayCommand } from '../base.js';

/** packageVersion reads the version from @headway/cli's package.json, two levels above dist/src. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return pkg.version ?? 'unknown';
}

export default class Version extends HeadwayCommand {
  static override summary = 'Print the headway version';

  async run(): Promise<void> {
    await this.parse(Version);
    const version = packageVersion();
    this.print({ version }, version);
  }
}
