import { asValue } from 'awilix';
import { POLICY, type AdapterDescriptor, type PolicySaveOptions, type PolicySourcePort, type StoragePort } from '@headway/core/ports';

/**
 * DatabasePolicySource keeps the policy text in storage, so `headway policy set`
 * and `PUT /api/v1/policy` change it live and every server instance reads the same text.
 */
export class DatabasePolicySource implements PolicySourcePort {
  readonly mode = 'database';
  constructor(private readonly storage: StoragePort) {}

  async load(): Promise<string | undefined> {
    return (await this.storage.policy.get())?.text;
  }

  async save(text: string, opts?: PolicySaveOptions): Promise<void> {
    const check = opts?.check;
    await this.storage.policy.set(text, check && { check: (rec) => check(rec?.text) });
  }

  describe(): string { return `the database (${this.storage.describe()})`; }
}

const descriptor: AdapterDescriptor = {
  port: 'policy',
  id: 'database',
  register({ container }) {
    const storage = container.resolve<StoragePort>('storage');
    container.register(POLICY, asValue(new DatabasePolicySource(storage)));
  },
};
export default descriptor;
