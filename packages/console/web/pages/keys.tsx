import { Page } from '../ui.js';

/** KeysPage: not built yet. */
export function KeysPage(_props: { arg?: string }) {
  return <Page title="Keys"><p>Not built yet.</p></Page>;
}
