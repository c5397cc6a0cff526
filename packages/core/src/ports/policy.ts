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
  /** save stores new text; absent (or throwing) where the source is read-only. */
  save?(text: string): Promise<void>;
  /** watch calls onChange when the text may have changed; returns an unsubscribe. */
  watch?(onChange: () => void): () => void;
  describe(): string;
}

export const POLICY = 'policySource';

export function assertPolicySourcePort(value: unknown, adapter: string): asserts value is PolicySourcePort {
  assertPort(value, adapter, 'policy', ['load', 'describe']);
}

// The DNS port moved to ports/dns.ts; re-exported so existing imports keep working.
export { DNS, assertDnsPort, type DnsPort, type DnsRecord } from './dns.js';
