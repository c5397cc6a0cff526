import { Page } from '../ui.js';

/** AuditPage: not built yet. */
export function AuditPage(_props: { arg?: string }) {
  return <Page title="Audit log"><p>Not built yet.</p></Page>;
}
