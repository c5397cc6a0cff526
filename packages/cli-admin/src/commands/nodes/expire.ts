import { Flags } from '@oclif/core';
import { parseDuration } from '@headway/core/ports';
import { HeadwayCommand, UsageError, boolFlag, expiresAt, idFlag, type ApiNode, nodeJson, commandAliases, seg } from '@headway/cli';

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i;

/** sameClock checks a time of day's hours (0-23), minutes and seconds (0-59), and a zone offset's hours and minutes. */
function sameClock(clock: string): boolean {
  const [h, mi, s] = clock.slice(0, 8).split(':').map((x) => Number.parseInt(x, 10));
  const zone = /([+-])(\d{2}):(\d{2})$/.exec(clock);
  return h! <= 23 && mi! <= 59 && (s === undefined || Number.isNaN(s) || s <= 59) && (!zone || (Number(zone[2]) <= 23 && Number(zone[3]) <= 59));
}

/** expiryTime reads --expiry: an RFC 3339 time (headscale), or a duration from now (30m, 24h, 90d). */
export function expiryTime(input: string, now = Date.now()): Date {
  const raw = input.trim();
  const ms = parseDuration(raw);
  if (ms !== undefined) return new Date(expiresAt(ms, now, '--expiry'));
  const m = RFC3339.exec(raw);
  // Date.parse rolls a day that does not exist over (February 31 into March): the parts must read back the same.
  const parsed = m ? new Date(`${raw.slice(0, 10)}T00:00:00Z`) : undefined;
  if (!m || Number.isNaN(Date.parse(raw)) || !parsed || parsed.toISOString().slice(0, 10) !== raw.slice(0, 10) || !sameClock(raw.slice(11))) {
    throw new UsageError(`--expiry: ${JSON.stringify(input)} is not an RFC 3339 time (e.g. 2030-08-27T10:00:00Z) or a duration (e.g. 24h, 90d)`);
  }
  return new Date(raw);
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
