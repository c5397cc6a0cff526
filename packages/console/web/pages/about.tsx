import { Page } from '../ui.js';

/** AboutPage: not built yet. */
export function AboutPage(_props: { arg?: string }) {
  return <Page title="About"><p>Not built yet.</p></Page>;
}
