import { Page } from '../ui.js';
import { PreAuthKeys } from './keys/preauth.js';
import { ApiKeys } from './keys/apikeys.js';

/** KeysPage: pre-auth keys (for joining machines) and API keys (for scripts and tools). */
export function KeysPage(_props: { arg?: string }) {
  return (
    <Page title="Keys">
      <div class="keys">
        <PreAuthKeys />
        <ApiKeys />
      </div>
    </Page>
  );
}
