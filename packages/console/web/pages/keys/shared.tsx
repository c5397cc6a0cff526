/*
 * keys/shared.tsx: what both kinds of key share on the Keys page: the expiry choices, whether a key has expired, and
 * the panel that shows a new key's secret once (it lives only in this page's memory, so a reload loses it for good).
 */
import { useState } from 'preact/hooks';
import { CopyButton } from '../../ui.js';

/** EXPIRIES are the lifetimes offered for a new key; the value is what the API's `expiration` reads (empty: never). */
export const EXPIRIES: { value: string; label: string }[] = [
  { value: '1h', label: '1 hour' },
  { value: '24h', label: '1 day' },
  { value: '7d', label: '7 days' },
  { value: '30d', label: '30 days' },
  { value: '90d', label: '90 days' },
  { value: '', label: 'Never' },
];

/** expired: the key's expiry has passed. */
export function expired(expiration: string | null | undefined): boolean {
  return !!expiration && new Date(expiration).getTime() <= Date.now();
}

/** ExpirySelect is the labelled expiry choice of a create form. */
export function ExpirySelect(props: { id: string; value: string; onChange: (v: string) => void }) {
  return (
    <div class="field">
      <label for={props.id}>Expires after</label>
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        {EXPIRIES.map((x) => <option key={x.value} value={x.value}>{x.label}</option>)}
      </select>
    </div>
  );
}

/** SecretOnce shows a new key's secret with a copy button and says it will not be shown again. */
export function SecretOnce(props: { what: string; secret: string; usage: string; onDone: () => void }) {
  return (
    <div class="secret-once" role="status" aria-labelledby="secret-once-title">
      <h2 id="secret-once-title">New {props.what}</h2>
      <p><strong>Copy it now: it will not be shown again.</strong> Headway keeps only its hash.</p>
      <p><code class="secret" data-secret>{props.secret}</code></p>
      <p class="usage">{props.usage}</p>
      <div class="secret-actions">
        <CopyButton text={props.secret} label={`Copy ${props.what}`} />
        <button type="button" onClick={props.onDone}>Done</button>
      </div>
    </div>
  );
}

/** useAction runs a change and keeps its outcome for the Alert: the notice it answers, or the server's refusal. */
export function useAction() {
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const run = async (change: () => Promise<string | undefined>) => {
    try {
      setNotice(await change());
      setError(undefined);
    } catch (err) { setError(err); }
  };
  return { error, notice, run };
}
