import { randomBytes } from 'node:crypto';
import { HeadwayCommand } from '../../base.js';
import { commandAliases } from '../../topics.js';

/**
 * newPrivateKey makes a Curve25519 private key in Tailscale's text form, `privkey:<64 hex>`,
 * clamped as Tailscale's key.NewMachine clamps it: the format of noise.private_key_path and
 * derp.server.private_key_path, so the output can be written to either file.
 */
export function newPrivateKey(): string {
  const k = randomBytes(32);
  k[0]! &= 248;
  k[31] = (k[31]! & 127) | 64;
  return `privkey:${k.toString('hex')}`;
}

export default class GeneratePrivateKey extends HeadwayCommand {
  static override summary = 'Generate a private key (for noise.private_key_path or derp.server.private_key_path)';
  static override hiddenAliases = commandAliases('generate', 'private-key');
  static override examples = ['<%= config.bin %> generate private-key > /var/lib/headway/noise_private.key'];

  async run(): Promise<void> {
    await this.parse(GeneratePrivateKey);
    const key = newPrivateKey();
    this.print({ private_key: key }, key);
  }
}
