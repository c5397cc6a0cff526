import { useRef, useState } from 'preact/hooks';
import { ApiError, call } from '../api.js';
import { Alert, Page, useLoad, when } from '../ui.js';
import { PolicyEditor, goTo } from './policy/editor.js';
import { Problems, Warnings, problemsOf, type Problem } from './policy/problems.js';
import { PolicyTests } from './policy/tests.js';
import { PolicyPreview } from './policy/preview.js';

/**
 * PolicyPage edits the access policy (HuJSON): check it, run its tests, preview one machine's reach, and save it at
 * the version it was loaded at, so a change another administrator saved meanwhile is never overwritten silently.
 * With policy.mode: file the text is shown read-only with where it comes from.
 */
export function PolicyPage(_props: { arg?: string }) {
  const area = useRef<HTMLTextAreaElement>(null);
  const [text, setText] = useState('');
  const [version, setVersion] = useState('');
  const [problems, setProblems] = useState<Problem[]>([]);
  const [warnings, setWarnings] = useState<string[]>([]);
  const [marked, setMarked] = useState<number>();
  const [stale, setStale] = useState(false);
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const loaded = useLoad(async () => {
    const p = await call('get', '/api/v1/policy');
    setText(p.policy);
    setVersion(p.version);
    setProblems([]);
    setWarnings([]);
    setMarked(undefined);
    setStale(false);
    return p;
  });
  const p = loaded.value;
  const readOnly = !!p && p.mode !== 'database';

  const go = (at: Problem) => {
    if (!at.line || !area.current) return;
    setMarked(at.line);
    goTo(area.current, at.line, at.column ?? 1);
  };
  /** refused shows why the server refused the text: errors at their lines, else the message. */
  const refused = (err: unknown) => {
    setNotice(undefined);
    if (err instanceof ApiError && err.status === 400 && err.code === 'invalid_policy') {
      const list = problemsOf(err);
      setProblems(list);
      setError(undefined);
      setMarked(list.find((x) => x.line)?.line);
    } else {
      setProblems([]);
      setError(err);
    }
  };
  const check = async () => {
    try {
      const r = await call('post', '/api/v1/policy/check', { body: { policy: text } });
      setProblems([]);
      setMarked(undefined);
      setError(undefined);
      setWarnings(r.warnings);
      setNotice('The policy is valid.');
    } catch (err) { refused(err); }
  };
  const save = async (e: Event) => {
    e.preventDefault();
    // A new attempt: the last one's answer no longer applies.
    setNotice(undefined);
    setStale(false);
    setProblems([]);
    setError(undefined);
    try {
      const r = await call('put', '/api/v1/policy', { body: { policy: text, version } });
      setVersion(r.version);
      setProblems([]);
      setMarked(undefined);
      setError(undefined);
      setWarnings(r.warnings);
      setNotice(`Saved; in force since ${when(r.updatedAt)}.`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) { setStale(true); setNotice(undefined); return; }
      refused(err);
    }
  };

  return (
    <Page title="Access policy">
      <div class="policy-page">
        <form class="policy-main" onSubmit={save} aria-label="Access policy">
          {readOnly
            ? <p class="policy-readonly" id="policy-hint" role="note">
                Read-only: this policy comes from <strong>{p?.source}</strong> (policy.mode: {p?.mode}). Edit that file and send the
                server SIGHUP to change it.
              </p>
            : <p class="policy-hint" id="policy-hint">
                {p && !p.policy ? 'No policy is set: every device may reach every device. ' : ''}
                HuJSON: JSON with comments and trailing commas. Tab moves on to the next control.
              </p>}
          <label for="policy-text">Policy</label>
          <PolicyEditor area={area} value={text} readOnly={readOnly} marked={marked} describedBy="policy-hint"
            onInput={(v) => { setText(v); setMarked(undefined); }} />
          <div class="policy-actions">
            <button type="button" onClick={check}>Check</button>
            {readOnly ? null : <button type="submit" class="primary">Save</button>}
            {p?.updatedAt ? <span class="policy-when">In force since {when(p.updatedAt)}</span> : null}
          </div>
          {stale
            ? <div class="alert error policy-stale" role="alert">
                <p>The policy was changed by someone else since you loaded it; your save was refused so their change is not lost.
                  Reload to see their version (your edits here are replaced), then make your change again.</p>
                <button type="button" onClick={loaded.reload}>Reload the policy</button>
              </div>
            : null}
          <Problems problems={problems} onGo={go} />
          <Warnings warnings={warnings} />
          <Alert error={error ?? loaded.error} notice={notice} />
        </form>
        <div class="policy-side">
          <PolicyTests text={() => text} />
          <PolicyPreview text={() => text} />
        </div>
      </div>
    </Page>
  );
}
