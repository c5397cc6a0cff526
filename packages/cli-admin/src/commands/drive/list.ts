import { HeadwayCommand, type ApiDriveGrant, commandAliases, driveGrantJson, driveGrantsTable } from '@headway/cli';

export default class DriveList extends HeadwayCommand {
  static override summary = 'List the Taildrive grants kept in the database (policy-written ones are in the policy)';
  static override examples = ['<%= config.bin %> drive list', '<%= config.bin %> drive list -o json'];
  static override hiddenAliases = commandAliases('drive', 'list', ['ls']);

  async run(): Promise<void> {
    await this.parse(DriveList);
    const { grants = [] } = await this.client().get<{ grants: ApiDriveGrant[] }>('/api/v1/drive');
    this.print(grants.map(driveGrantJson), () => (grants.length ? driveGrantsTable(grants) : 'No drive grants'));
  }
}
