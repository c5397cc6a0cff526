import { Page } from '../ui.js';

/** DnsPage: not built yet. */
export function DnsPage(_props: { arg?: string }) {
  return <Page title="DNS"><p>Not built yet.</p></Page>;
}
