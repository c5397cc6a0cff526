import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';

/**
 * ChangeProfiler samples this process's CPU between start and stop and writes the profile (BENCH_CHANGE_PROF: the
 * server and each worker profile one measured change; a whole run's --cpu-prof mixes it into a minute of joins).
 */
export class ChangeProfiler {
  private session: Session | undefined;

  async start(intervalUs: number): Promise<null> {
    this.session ??= new Session();
    this.session.connect();
    await this.session.post('Profiler.enable');
    await this.session.post('Profiler.setSamplingInterval', { interval: intervalUs });
    await this.session.post('Profiler.start');
    return null;
  }

  /** stop writes the profile to file and returns its name. */
  async stop(file: string): Promise<string> {
    if (!this.session) throw new Error('profileStop without profileStart');
    const { profile } = await this.session.post('Profiler.stop');
    this.session.disconnect();
    writeFileSync(file, JSON.stringify(profile));
    return file;
  }
}
