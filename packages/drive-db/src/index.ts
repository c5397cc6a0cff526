import { asValue } from 'awilix';
import { DRIVE, type AdapterDescriptor, type DriveGrant, type DriveGrantRecord, type DriveGrantRepository, type DriveGrantStore, type StoragePort } from '@headway/core/ports';

/**
 * DatabaseDriveGrants keeps Taildrive grants in Headway's own database (table
 * `drive_grants`), so `headway drive grant|revoke` and `/api/v1/drive` change
 * them live and every server instance on the same database reads the same ones.
 * It is a plain store: the kernel checks a grant before it arrives here and
 * recompiles every device's map after it is stored.
 */
export class DatabaseDriveGrants implements DriveGrantStore {
  constructor(private readonly repo: DriveGrantRepository) {}

  async grants(): Promise<DriveGrant[]> {
    return (await this.repo.list()).map(({ src, dst, shares, access }) => ({ src, dst, shares, access }));
  }

  list(): Promise<DriveGrantRecord[]> { return this.repo.list(); }
  grant(grant: DriveGrant): Promise<DriveGrantRecord> { return this.repo.create(grant); }
  revoke(id: number): Promise<boolean> { return this.repo.delete(id); }
  revokeFor(end: { kind: 'user' | 'node'; id: number }): Promise<number> { return this.repo.deleteFor(end); }
}

const descriptor: AdapterDescriptor = {
  port: 'drive',
  id: 'db',
  register({ container, config }) {
    const storage = container.resolve<StoragePort>('storage');
    if (!storage.driveGrants) {
      throw new Error(`the storage adapter of database.type ${config.database.type} keeps no drive grants (StoragePort.driveGrants); use sqlite, postgres or mysql`);
    }
    container.register(DRIVE, asValue(new DatabaseDriveGrants(storage.driveGrants)));
  },
};
export default descriptor;
