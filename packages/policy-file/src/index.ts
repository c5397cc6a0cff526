import { readFile } from 'node:fs/promises';
import { asValue } from 'awilix';
import { POLICY, type AdapterDescriptor, type PolicySourcePort } from '@headway/core/ports';

/**
 * FilePolicySource reads the HuJSON policy file named by `policy.path` at start-up
 * and again on SIGHUP; it cannot save, so the API tells admins how to switch modes.
 * An empty path means no policy: every node may reach every node.
 */
export class FilePolicySource implements PolicySourcePort {
  readonly mode = 'file';
  constructor(private readonly path: string, private readonly signal: NodeJS.Signals | null = 'SIGHUP') {}

  async load(): Promise<string | undefined> {
    if (!this.path) return undefined;
    try {
      return await readFile(this.path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new Error(`cannot read policy file ${this.path}: ${code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
    }
  }

  watch(onChange: () => void): () => void {
    if (!this.signal) return () => undefined;
    const handler = () => onChange();
    process.on(this.signal, handler);
    return () => process.off(this.signal!, handler);
  }

  describe(): string { return this.path ? `file ${this.path}` : 'no file (policy.path is empty, so all traffic is allowed)'; }
}

const descriptor: AdapterDescriptor = {
  port: 'policy',
  id: 'file',
  register({ container, config }) {
    container.register(POLICY, asValue(new FilePolicySource(config.policy.path)));
  },
};
export default descriptor;
