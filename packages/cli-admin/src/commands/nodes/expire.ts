import { Flags } from '@oclif/core';
import { parseDuration, rfc3339Time } from '@headway/core/ports';
import { HeadwayCommand, UsageError, boolFlag, expiresAt, idFlag, type ApiNode, nodeJson, commandAliases, seg } from '@headway/cli';

/** expiryTime reads --expiry: an RFC 3339 time (headscale), or a duration from now (30m, 24h, 90d). */
export function expiryTime(input: string, now = Date.now()): Date {
  const raw = input.trim();
  const ms = parseDuration(raw);
  if (ms !== undefined) return new Date(expiresAt(ms, now, '--expiry'));
  // The server's reader: a day that does not exist (February 31) is refused, not rolled over into March.
  const at = rfc3339Time(raw);
  if (!at) throw new UsageError(`--expiry: ${JSON.stringify(input)} is not an RFC 3339 time (e.g. 2030-08-27T10:00:00Z) or a duration (e.g. 24h, 90d)`);
  return at;
}

export default class NodesExpire extends HeadwayCommand {
  static override summary = 'Expire (log out) a node now, set when it expires, or disable its expiry';
  static override description = 'Expiring a node keeps it in the database and makes its device log in again. --expiry sets a time (the node expires then), --disable makes it never expire.';
  static override hiddenAliases = commandAliases('nodes', 'expire', ['logout', 'exp', 'e']);
  static override examples = [
    '<%= config.bin %> nodes expire -i 7',
    '<%= config.bin %> nodes expire -i 7 --expiry 2030-08-27T10:00:00Z',
    '<%= config.bin %> nodes expire -i 7 --expiry 90d',
    '<%= config.bin %> nodes expire -i 7 --disable',
  ];
  static override flags = {
    identifier: idFlag({ char: 'i', description: 'id of the node', required: true }),
    expiry: Flags.string({ char: 'e', description: 'expire at this time (RFC 3339, e.g. 2030-08-27T10:00:00Z, or a duration from now such as 90d); empty: now' }),
    disable: boolFlag({ char: 'd', description: 'disable key expiry (the node never expires)' }),
  };


  async run(): Promise<void> {
    const { flags } = await this.parse(NodesExpire);
    if (flags.disable && flags.expiry) throw new UsageError('pass --expiry or --disable, not both');
    const path = `/api/v1/node/${seg(flags.identifier)}/expire` as const;
    if (flags.disable) {
      const { node } = await this.client().post<{ node: ApiNode }>(path, undefined, { disableExpiry: 'true' });
      this.print(nodeJson(node), 'Node expiry disabled');
      return;
    }
    const at = flags.expiry ? expiryTime(flags.expiry) : undefined;
    const { node } = await this.client().post<{ node: ApiNode }>(path, undefined, at ? { expiry: at.toISOString() } : undefined);
    this.print(nodeJson(node), !at || at.getTime() <= Date.now() ? 'Node expired' : 'Node expiration updated');
  }
}
