/* policy/preview.tsx: what one machine could reach, and who could reach it, under the policy in the editor (not saved). */
import { useState } from 'preact/hooks';
import { call, type Answer } from '../../api.js';
import { Alert, useLoad } from '../../ui.js';

type Reach = Answer<'/api/v1/policy/preview', 'post'>;

function ReachList(props: { title: string; id: string; entries: Reach['canReach']; none: string }) {
  return (
    <div class="reach" aria-labelledby={props.id}>
      <h3 id={props.id}>{props.title}</h3>
      {props.entries.length === 0 ? <p>{props.none}</p> : (
        <ul>{props.entries.map((e) => <li key={e.id}><strong>{e.name}</strong>: {e.ports.map((p) => (p === '*' ? 'any port' : p)).join(', ')}</li>)}</ul>
      )}
    </div>
  );
}

export function PolicyPreview(props: { text: () => string }) {
  const nodes = useLoad(() => call('get', '/api/v1/node').then((a) => a.nodes));
  const [node, setNode] = useState('');
  const [reach, setReach] = useState<Reach>();
  const [error, setError] = useState<unknown>();
  const chosen = node || nodes.value?.[0]?.id || '';
  const preview = async (e: Event) => {
    e.preventDefault();
    try {
      setReach(await call('post', '/api/v1/policy/preview', { body: { policy: props.text(), node: chosen } }));
      setError(undefined);
    } catch (err) { setError(err); setReach(undefined); }
  };
  return (
    <section class="policy-tool" aria-labelledby="policy-preview-title">
      <h2 id="policy-preview-title">Preview</h2>
      <p>What one machine could reach, and what could reach it, under the policy as written in the editor.</p>
      {nodes.value?.length === 0 ? <p>No machines yet.</p> : (
        <form class="inline-form" onSubmit={preview}>
          <label for="preview-node">Machine</label>
          <select id="preview-node" value={chosen} onChange={(e) => setNode(e.currentTarget.value)}>
            {(nodes.value ?? []).map((n) => <option key={n.id} value={n.id}>{n.givenName}</option>)}
          </select>
          <button type="submit" disabled={!chosen}>Preview</button>
        </form>
      )}
      <Alert error={error ?? nodes.error} />
      {reach
        ? <div class="preview-result" role="status" aria-label={`Preview for ${reach.node.name}`}>
            <p>Under the policy in the editor, <strong>{reach.node.name}</strong>:</p>
            <ReachList id="reach-out" title="Can reach" entries={reach.canReach} none="Nothing: it may open no connection." />
            <ReachList id="reach-in" title="Can be reached from" entries={reach.reachableFrom} none="Nothing may open a connection to it." />
            <div class="reach">
              <h3>Sees as peers</h3>
              <p>{reach.peers.length ? reach.peers.map((p) => p.name).join(', ') : 'No peers.'}</p>
            </div>
          </div>
        : null}
    </section>
  );
}
