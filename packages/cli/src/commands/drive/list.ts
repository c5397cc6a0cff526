import { HeadwayCommand } from '../../base.js';
import type { ApiDriveGrant } from '../../api-types.js';
import { driveGrantJson, driveGrantsTable } from '../../format.js';

export default class DriveList extends HeadwayCommand {
  static override summary = 'List the Taildrive grants kept in the database (policy-written ones are in the policy)';
  static override aliases = ['drive:ls'];

  async run(): Promise<void> {
    await this.parse(DriveList);
    const { grants = [] } = await this.client().get<{ grants: ApiDriveGrant[] }>('/api/v1/drive');
    this.print(grants.map(driveGrantJson), () => (grants.length ? driveGrantsTable(grants) : 'No drive grants'));
  }
}
