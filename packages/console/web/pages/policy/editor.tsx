/*
 * policy/editor.tsx: the policy text editor: a plain textarea (so Tab leaves it, as everywhere else) with line
 * numbers alongside, one marked line (where a problem is), and moving the caret to a line and column.
 */
import { useRef } from 'preact/hooks';
import type { RefObject } from 'preact';

/** offsetOf is the text index of a 1-based line and column (clamped to the text). */
export function offsetOf(text: string, line: number, column: number): number {
  let at = 0;
  for (let l = 1; l < line; l++) {
    const nl = text.indexOf('\n', at);
    if (nl < 0) return text.length;
    at = nl + 1;
  }
  const end = text.indexOf('\n', at);
  return Math.min(at + Math.max(column - 1, 0), end < 0 ? text.length : end);
}

/** goTo focuses the editor with the caret at `line`:`column` and scrolls that line into view. */
export function goTo(area: HTMLTextAreaElement, line: number, column: number): void {
  const at = offsetOf(area.value, line, column);
  area.focus();
  area.setSelectionRange(at, at);
  const lineHeight = parseFloat(getComputedStyle(area).lineHeight) || 20;
  const top = (line - 1) * lineHeight;
  if (top < area.scrollTop || top > area.scrollTop + area.clientHeight - lineHeight) area.scrollTop = Math.max(0, top - area.clientHeight / 3);
  area.dispatchEvent(new Event('scroll'));
}

export function PolicyEditor(props: {
  area: RefObject<HTMLTextAreaElement | null>;
  value: string;
  readOnly: boolean;
  marked?: number;
  describedBy: string;
  onInput: (text: string) => void;
}) {
  const gutter = useRef<HTMLDivElement>(null);
  const lines = props.value.split('\n').length;
  const sync = () => { if (gutter.current && props.area.current) gutter.current.scrollTop = props.area.current.scrollTop; };
  return (
    <div class="policy-editor">
      <div class="policy-gutter" ref={gutter} aria-hidden="true">
        {Array.from({ length: lines }, (_, i) => (
          <div key={i} class={i + 1 === props.marked ? 'marked' : undefined} data-line={i + 1}>{i + 1}</div>
        ))}
      </div>
      <textarea
        id="policy-text" ref={props.area} value={props.value} readOnly={props.readOnly} wrap="off" spellcheck={false}
        autocomplete="off" autocapitalize="off" rows={24} aria-describedby={props.describedBy}
        onInput={(e) => props.onInput(e.currentTarget.value)} onScroll={sync}
      />
    </div>
  );
}
