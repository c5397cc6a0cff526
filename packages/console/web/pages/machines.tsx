import { Page } from '../ui.js';

/** MachinesPage: not built yet. */
export function MachinesPage(_props: { arg?: string }) {
  return <Page title="Machines"><p>Not built yet.</p></Page>;
}
