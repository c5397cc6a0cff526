/* policy/tests.tsx: the policy's `tests` and `sshTests` blocks, run on demand against the live tailnet, one verdict each. */
import { useState } from 'preact/hooks';
import { call, type Schemas } from '../../api.js';
import { Alert } from '../../ui.js';

type Result = Schemas['PolicyTestResult'];

export function PolicyTests(props: { text: () => string }) {
  const [results, setResults] = useState<Result[]>();
  const [error, setError] = useState<unknown>();
  const run = async () => {
    try {
      setResults((await call('post', '/api/v1/policy/tests', { body: { policy: props.text() } })).results);
      setError(undefined);
    } catch (err) { setError(err); setResults(undefined); }
  };
  const failed = results?.filter((r) => !r.passed).length ?? 0;
  return (
    <section class="policy-tool" aria-labelledby="policy-tests-title">
      <h2 id="policy-tests-title">Tests</h2>
      <p>Runs the policy's <code>tests</code> and <code>sshTests</code> as written in the editor, against the machines there are now. Saving refuses a policy whose tests fail.</p>
      <button type="button" onClick={run}>Run tests</button>
      <Alert error={error} />
      {results
        ? <div role="status">
            <p class="policy-tests-summary">{results.length === 0 ? 'The policy has no tests.' : failed ? `${failed} of ${results.length} failed` : `All ${results.length} passed`}</p>
            <ul class="policy-tests">
              {results.map((r) => (
                <li key={`${r.block}${r.index}`} class={r.passed ? 'pass' : 'fail'} data-test={`${r.block}[${r.index}]`}>
                  <span class="verdict">{r.passed ? 'Passed' : 'Failed'}</span> <code>{r.block}[{r.index}]</code> from <code>{r.src}</code>
                  {r.failures.length ? <ul>{r.failures.map((f, i) => <li key={i}>{f}</li>)}</ul> : null}
                </li>
              ))}
            </ul>
          </div>
        : null}
    </section>
  );
}
