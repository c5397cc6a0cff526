import { assertPort } from './assert.js';

/**
 * PolicySourcePort supplies the policy text. File mode reads a HuJSON file (and
 * re-reads on SIGHUP); database mode keeps it in storage and accepts `save`.
 */
export interface PolicySourcePort {
  /** mode names the source for messages, e.g. `file` or `database`. */
  readonly mode: string;
  /** load returns the current policy text, or undefined when none is configured. */
  load(): Promise<string | undefined>;
  /**
   * save stores new text; absent (or throwing) where the source is read-only. `check`, when given, runs where the
   * write happens, with the text stored at that moment (undefined: none), and no other save can come between it
   * and the write (on every instance sharing the store); when it throws, nothing is written and save rejects with it.
   */
  save?(text: string, opts?: PolicySaveOptions): Promise<void>;
  /** watch calls onChange when the text may have changed; returns an unsubscribe. */
  watch?(onChange: () => void): () => void;
  describe(): string;
}

/** PolicySaveOptions: a compare-and-set condition on the stored text (a version check). */
export interface PolicySaveOptions {
  check?: (current: string | undefined) => void;
}

export const POLICY = 'policySource';

export function assertPolicySourcePort(value: unknown, adapter: string): asserts value is PolicySourcePort {
  assertPort(value, adapter, 'policy', ['load', 'describe']);
}

// The DNS port moved to ports/dns.ts; re-exported so existing imports keep working.
export { DNS, assertDnsPort, type DnsPort, type DnsRecord } from './dns.js';
