import { Page } from '../ui.js';

/** PolicyPage: not built yet. */
export function PolicyPage(_props: { arg?: string }) {
  return <Page title="Access policy"><p>Not built yet.</p></Page>;
}
