import { createHash } from 'node:crypto';
import { listErrors, type Policy } from '@headway/policy';
import { HeadwayError } from '../errors.js';
import type { Logger } from '../log.js';
import type { PolicySourcePort } from '../ports/policy.js';
import type { State } from '../state/state.js';

/**
 * PolicyEngine is what the kernel needs from a policy compiler: turn text into a
 * compiled policy checked against the live users and nodes (returning warnings,
 * throwing a message on error). @headway/policy provides it. PolicyService calls
 * it once per policy change and hands the result on, so nobody else parses.
 */
export interface PolicyEngine {
  compile(text: string, state: State): { policy: Policy; warnings: string[] };
  /** check reports every error it can find (not only the first) and, when there are none, the compiled policy and its warnings. */
  check?(text: string, state: State): { policy?: Policy; errors: string[]; warnings: string[] };
}

/**
 * InvalidPolicyError carries every error found in a policy, so one round of `policy check`
 * shows them all; the API sends them as the problem's `errors` list (detail joins the first
 * MAX_LISTED_ERRORS of them and says how many more there are).
 */
export class InvalidPolicyError extends HeadwayError {
  constructor(readonly errors: string[]) {
    super('invalid_policy', errors.length === 1 ? errors[0]! : `${errors.length} errors: ${listErrors(errors).join('; ')}`, 'policy');
  }
}

/**
 * policyVersion names one version of the policy text: the SHA-256 of the text (hex), the same on every instance
 * for the same text; no policy is the version of the empty text. /api/v2 sends it as the ETag and compares If-Match with it.
 */
export function policyVersion(text: string | undefined): string {
  return createHash('sha256').update(text ?? '').digest('hex');
}

/** PolicySetOptions: `ifVersion` sets the text only if the stored text is still that version (else 412 precondition_failed). */
export interface PolicySetOptions {
  ifVersion?: string | readonly string[];
}

/**
 * PolicyService owns the policy in force: where it comes from (the source port),
 * whether new text is acceptable (the engine), the compiled result (parsed once
 * per change and handed to the network view, route auto-approval and tag checks),
 * and telling devices when it changes.
 */
export class PolicyService {
  private text: string | undefined;
  private policy: Policy | null = null;
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
        this.policy = this.engine.compile(text, this.state).policy;
      } catch (err) {
        throw new Error(`policy from ${this.source.describe()} is invalid: ${(err as Error).message}`);
      }
    }
    this.text = text;
    this.updatedAt = text !== undefined ? new Date() : null;
    this.unwatch = this.source.watch?.(() => void this.reload());
  }

  /**
   * reload re-reads the source (SIGHUP in file mode); an invalid text keeps the old
   * policy. `remote`: another cluster instance changed it (published as not to be announced again).
   */
  async reload(opts: { remote?: boolean } = {}): Promise<boolean> {
    let text: string | undefined;
    let policy: Policy | null = null;
    try {
      text = await this.source.load();
      // Unchanged text is no change: keep the compiled policy in force.
      if (text === this.text) return true;
      if (text !== undefined) policy = this.engine.compile(text, this.state).policy;
    } catch (err) {
      this.logger.error('policy reload failed; keeping the policy in force', { source: this.source.describe(), error: (err as Error).message });
      return false;
    }
    this.apply(text, policy, opts.remote);
    this.logger.info('policy reloaded', { source: this.source.describe() });
    return true;
  }

  get policyText(): string | undefined { return this.text; }

  /** compiled is the policy in force as the engine compiled it (null: no policy, everything allowed). */
  get compiled(): Policy | null { return this.policy; }

  current(): { policy: string; updatedAt: string | null; mode: string } {
    return { policy: this.text ?? '', updatedAt: this.updatedAt?.toISOString() ?? null, mode: this.source.mode };
  }

  /** check validates text against live users and nodes and returns its warnings. */
  async check(text: string): Promise<string[]> {
    return this.compileChecked(text).warnings;
  }

  /** compileChecked compiles text once, reporting every error the engine finds as one InvalidPolicyError. */
  private compileChecked(text: string): { policy: Policy; warnings: string[] } {
    if (this.engine.check) {
      const { policy, errors, warnings } = this.engine.check(text, this.state);
      if (errors.length || !policy) throw new InvalidPolicyError(errors.length ? errors : ['the policy engine returned no policy']);
      return { policy, warnings };
    }
    try {
      return this.engine.compile(text, this.state);
    } catch (err) {
      throw new HeadwayError('invalid_policy', (err as Error).message, 'policy');
    }
  }

  /** origin says where the policy is kept, as an administrator reads it (the file's path, or the database). */
  get origin(): string { return this.source.describe(); }

  /** version is policyVersion of the text in force. */
  get version(): string { return policyVersion(this.text); }

  /**
   * set checks and stores text, then puts it in force. With `ifVersion` the comparison with the stored text happens
   * inside the source's write (PolicySourcePort.save's check), so two writers holding the same version, on this
   * instance or another sharing the database, cannot both succeed.
   */
  async set(text: string, opts: PolicySetOptions = {}): Promise<{ policy: string; updatedAt: string; warnings: string[] }> {
    if (!this.source.save) {
      throw new HeadwayError('policy_read_only',
        `policy set needs policy.mode: database; with policy.mode: ${this.source.mode} the policy comes from ${this.source.describe()}. `
        + 'Set policy.mode: database to manage it with `headway policy set`, or write it to the file named by policy.path and send SIGHUP');
    }
    const { policy, warnings } = this.compileChecked(text);
    const want = typeof opts.ifVersion === 'string' ? [opts.ifVersion] : opts.ifVersion;
    await this.source.save(text, want === undefined ? undefined : {
      check: (current) => {
        if (!want.includes(policyVersion(current))) {
          const named = want.map((v) => JSON.stringify(v.slice(0, 80))).join(', ');
          throw new HeadwayError('precondition_failed', `the policy is no longer version ${named}: read it again (its version is the ETag) and apply your change to that`);
        }
      },
    });
    this.apply(text, policy);
    return { policy: text, updatedAt: this.updatedAt!.toISOString(), warnings };
  }

  /** checkTagsAllowed refuses tags the policy in force does not define in tagOwners. */
  async checkTagsAllowed(tags: string[]): Promise<void> {
    if (!this.policy) return;
    const defined = Object.keys(this.policy.tagOwners ?? {});
    const unknown = tags.filter((t) => !defined.includes(t));
    if (unknown.length) {
      throw new HeadwayError('invalid_field', `tags: ${unknown.join(', ')} not defined in the policy's tagOwners`, 'tags');
    }
  }

  private apply(text: string | undefined, policy: Policy | null, remote = false): void {
    this.text = text;
    this.policy = policy;
    this.updatedAt = new Date();
    if (remote) this.state.bus.publishRemote({ type: 'policy-changed' });
    else this.state.bus.publish({ type: 'policy-changed' });
  }

  close(): void { this.unwatch?.(); }
}
