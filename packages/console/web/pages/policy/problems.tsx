/*
 * policy/problems.tsx: a refused policy's errors, each at its line and column when the server names one (its
 * messages start "line L, column C: "), as buttons that move the editor's caret there; and the warnings.
 */
import { ApiError } from '../../api.js';
import { errorText } from '../../ui.js';

export interface Problem { line?: number; column?: number; message: string }

/** problemsOf reads a refusal: every error the server listed (or its one message), with line and column split off. */
export function problemsOf(err: unknown): Problem[] {
  const list = err instanceof ApiError && err.errors?.length ? err.errors : [errorText(err)];
  return list.map((m) => {
    const at = /^line (\d+), column (\d+): ([\s\S]*)$/.exec(m);
    return at ? { line: Number(at[1]), column: Number(at[2]), message: at[3]! } : { message: m };
  });
}

export function Problems(props: { problems: Problem[]; onGo: (p: Problem) => void }) {
  if (!props.problems.length) return null;
  const n = props.problems.length;
  return (
    <div class="policy-problems" role="alert">
      <h2>{n === 1 ? 'The policy has an error' : `The policy has ${n} errors`}</h2>
      <ul>
        {props.problems.map((p, i) => (
          <li key={i}>
            {p.line
              ? <button type="button" class="problem" data-line={p.line} data-column={p.column} onClick={() => props.onGo(p)}>
                  <span class="at">Line {p.line}, column {p.column}:</span> {p.message}
                </button>
              : <span class="problem">{p.message}</span>}
          </li>
        ))}
      </ul>
    </div>
  );
}

export function Warnings(props: { warnings: string[] }) {
  if (!props.warnings.length) return null;
  return (
    <div class="policy-warnings" role="status">
      <h2>{props.warnings.length === 1 ? 'Warning' : `${props.warnings.length} warnings`}</h2>
      <ul>{props.warnings.map((w, i) => <li key={i}>{w}</li>)}</ul>
    </div>
  );
}
