import { Args } from '@oclif/core';
import { HeadwayCommand, idFlag, UsageError } from '@headway/cli';

export default class DriveRevoke extends HeadwayCommand {
  static override summary = 'Revoke a Taildrive grant (pushed to devices at once)';
  static override examples = ['<%= config.bin %> drive revoke 3', '<%= config.bin %> drive revoke --id 3'];
  static override args = { id: Args.string({ description: 'the grant id (headway drive list)' }) };
  static override flags = { id: idFlag({ char: 'i', description: 'the grant id (instead of the argument)' }) };

  async run(): Promise<void> {
    const { args, flags } = await this.parse(DriveRevoke);
    if (flags.id !== undefined && args.id !== undefined) throw new UsageError('pass the grant id once: as the argument or as --id');
    const id = flags.id ?? args.id?.trim();
    if (!id) throw new UsageError('name the grant to revoke: headway drive revoke ID (ids are in headway drive list)');
    if (!/^[1-9]\d*$/.test(id)) throw new UsageError(`${JSON.stringify(id)} is not a grant id (a positive whole number)`);
    await this.client().delete(`/api/v1/drive/${id}`);
    this.print({}, `Drive grant ${id} revoked`);
  }
}
