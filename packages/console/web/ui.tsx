/*
 * ui.tsx: the pieces every page shares: a page frame with its heading, an error line read by screen readers, a
 * confirmation dialog (the native <dialog>, so focus and Escape behave), a copy button and a loader hook.
 */
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useId, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.js';

export function Page(props: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-head">
        <h1 id="page-title" tabIndex={-1}>{props.title}</h1>
        {props.actions ? <div class="page-actions">{props.actions}</div> : null}
      </header>
      {props.children}
    </section>
  );
}

/** errorText is what a failure says to the administrator: the server's message, or the exception's. */
export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return err instanceof Error ? err.message : String(err);
}

/** Alert shows a failure (role=alert, announced when it appears) or a notice (role=status). */
export function Alert(props: { error?: unknown; notice?: string }) {
  if (props.error) return <p class="alert error" role="alert">{errorText(props.error)}</p>;
  if (props.notice) return <p class="alert notice" role="status">{props.notice}</p>;
  return null;
}

/** useLoad runs `load` now and whenever `reload` is called; answers the value, the error and whether it is loading. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []) {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [loading, setLoading] = useState(true);
  const reload = useCallback(() => {
    setLoading(true);
    load().then((v) => { setValue(v); setError(undefined); }, setError).finally(() => setLoading(false));
  }, deps);
  useEffect(reload, [reload]);
  return { value, error, loading, reload, setValue };
}

/** Confirm asks before a change that cannot be undone; `onConfirm` runs on the confirming button only. */
export function Confirm(props: { open: boolean; title: string; children: ComponentChildren; confirm: string; onConfirm: () => void; onCancel: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  // Unique per dialog: a page may hold several.
  const titleId = useId();
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (props.open && !d.open) d.showModal();
    if (!props.open && d.open) d.close();
  }, [props.open]);
  return (
    <dialog ref={ref} aria-labelledby={titleId} onClose={props.onCancel}>
      <h2 id={titleId}>{props.title}</h2>
      <div>{props.children}</div>
      <div class="dialog-actions">
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button type="button" class="danger" onClick={props.onConfirm}>{props.confirm}</button>
      </div>
    </dialog>
  );
}

/** CopyButton copies `text` to the clipboard and says so. */
export function CopyButton(props: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  const copy = () => {
    navigator.clipboard.writeText(props.text).then(() => { setDone(true); setTimeout(() => setDone(false), 2000); }, () => setDone(false));
  };
  return <button type="button" onClick={copy}>{done ? 'Copied' : (props.label ?? 'Copy')}</button>;
}

/** when formats a time as the administrator's locale writes it; empty for none. */
export function when(iso: string | undefined | null): string {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleString();
}
