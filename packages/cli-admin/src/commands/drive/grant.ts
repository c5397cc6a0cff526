import { Flags } from '@oclif/core';
import { HeadwayCommand, listFlag, splitList, type ApiDriveGrant, driveGrantJson, driveGrantsTable } from '@headway/cli';

export default class DriveGrant extends HeadwayCommand {
  static override summary = 'Let devices reach the Taildrive shares of a node or tag (pushed to devices at once)';
  static override description = 'Needs the database drive adapter: {package: "@headway/drive-db", port: drive} under plugins:. '
    + 'The source may then access (drive:access) and the destination may share (drive:share); no policy change is needed.';
  static override examples = [
    '<%= config.bin %> drive grant --from alice --to node:nas --share docs --access ro',
    '<%= config.bin %> drive grant --from group:eng --to tag:fileserver --access rw',
  ];
  static override flags = {
    from: Flags.string({ char: 'f', required: true, description: 'who gets access: user:NAME (or a bare user name), group:NAME, tag:NAME or node:NAME|ID' }),
    to: Flags.string({ char: 't', required: true, description: 'whose shares: node:NAME|ID (or a bare node name) or tag:NAME' }),
    share: listFlag({ char: 's', description: 'share names (comma-separated or repeated); default * (every share)' }),
    access: Flags.string({ char: 'a', options: ['ro', 'rw'], default: 'ro', description: 'ro (read-only) or rw (read-write)' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(DriveGrant);
    const shares = splitList(flags.share);
    const { grant } = await this.client().post<{ grant: ApiDriveGrant }>('/api/v1/drive', {
      src: flags.from, dst: flags.to, shares: shares.length ? shares : ['*'], access: flags.access,
    });
    this.print(driveGrantJson(grant), () => `Drive grant ${grant.id} added\n${driveGrantsTable([grant])}`);
  }
}
