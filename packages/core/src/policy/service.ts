import { HeadwayError } from '../errors.js';
import type { Logger } from '../log.js';
import type { PolicySourcePort } from '../ports/policy.js';
import type { State } from '../state/state.js';

/**
 * PolicyEngine is what the kernel needs from a policy compiler: validate text
 * against the live users and nodes (returning warnings, throwing a message on
 * error) and list the tags a policy defines. @headway/policy provides it.
 */
export interface PolicyEngine {
  validate(text: string, state: State): { warnings: string[] };
  /** check reports every error it can find (not only the first) and, when there are none, the warnings. */
  check?(text: string, state: State): { errors: string[]; warnings: string[] };
  definedTags(text: string): string[] | undefined;
}

/**
 * InvalidPolicyError carries every error found in a policy, so one round of `policy check`
 * shows them all; the API sends them as the problem's `errors` list (detail joins them).
 */
export class InvalidPolicyError extends HeadwayError {
  constructor(readonly errors: string[]) {
    super('invalid_policy', errors.length === 1 ? errors[0]! : `${errors.length} errors: ${errors.join('; ')}`, 'policy');
  }
}

/**
 * PolicyService owns the policy in force: where it comes from (the source port),
 * whether new text is acceptable (the engine), and telling devices when it changes.
 */
export class PolicyService {
  private text: string | undefined;
  private updatedAt: Date | null = null;
  private unwatch?: () => void;

  constructor(
    private readonly source: PolicySourcePort,
    private readonly state: State,
    private readonly logger: Logger,
    private readonly engine: PolicyEngine,
  ) {}

  /** init loads the policy at start-up; an invalid policy stops the server. */
  async init(): Promise<void> {
    const text = await this.source.load();
    if (text !== undefined) {
      try {
        this.engine.validate(text, this.state);
      } catch (err) {
        throw new Error(`policy from ${this.source.describe()} is invalid: ${(err as Error).message}`);
      }
    }
    this.text = text;
    this.updatedAt = text !== undefined ? new Date() : null;
    this.unwatch = this.source.watch?.(() => void this.reload());
  }

  /** reload re-reads the source (SIGHUP in file mode); an invalid text keeps the old policy. */
  async reload(): Promise<boolean> {
    let text: string | undefined;
    try {
      text = await this.source.load();
      if (text !== undefined) this.engine.validate(text, this.state);
    } catch (err) {
      this.logger.error('policy reload failed; keeping the policy in force', { source: this.source.describe(), error: (err as Error).message });
      return false;
    }
    if (text === this.text) return true;
    this.apply(text);
    this.logger.info('policy reloaded', { source: this.source.describe() });
    return true;
  }

  get policyText(): string | undefined { return this.text; }

  current(): { policy: string; updatedAt: string | null; mode: string } {
    return { policy: this.text ?? '', updatedAt: this.updatedAt?.toISOString() ?? null, mode: this.source.mode };
  }

  /** check validates text against live users and nodes and returns its warnings. */
  async check(text: string): Promise<string[]> {
    if (this.engine.check) {
      const { errors, warnings } = this.engine.check(text, this.state);
      if (errors.length) throw new InvalidPolicyError(errors);
      return warnings;
    }
    try {
      return this.engine.validate(text, this.state).warnings;
    } catch (err) {
      throw new HeadwayError('invalid_policy', (err as Error).message, 'policy');
    }
  }

  async set(text: string): Promise<{ policy: string; updatedAt: string; warnings: string[] }> {
    if (!this.source.save) {
      throw new HeadwayError('policy_read_only',
        `policy set needs policy.mode: database; with policy.mode: ${this.source.mode} the policy comes from ${this.source.describe()}. `
        + 'Set policy.mode: database to manage it with `headway policy set`, or write it to the file named by policy.path and send SIGHUP');
    }
    const warnings = await this.check(text);
    await this.source.save(text);
    this.apply(text);
    return { policy: text, updatedAt: this.updatedAt!.toISOString(), warnings };
  }

  /** checkTagsAllowed refuses tags the policy in force does not define in tagOwners. */
  async checkTagsAllowed(tags: string[]): Promise<void> {
    if (this.text === undefined) return;
    const defined = this.engine.definedTags(this.text);
    if (!defined) return;
    const unknown = tags.filter((t) => !defined.includes(t));
    if (unknown.length) {
      throw new HeadwayError('invalid_field', `tags: ${unknown.join(', ')} not defined in the policy's tagOwners`, 'tags');
    }
  }

  private apply(text: string | undefined): void {
    this.text = text;
    this.updatedAt = new Date();
    this.state.bus.publish({ type: 'policy-changed' });
  }

  close(): void { this.unwatch?.(); }
}
