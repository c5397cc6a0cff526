/*
 * live.ts: the server's change events (/admin/events, server-sent) for the pages that follow them: a machine going on- or
 * offline arrives as `node` {id, online, lastSeen} and is shown in place; a machine added, changed or removed (and a
 * user changed) arrives as `nodes` / `users` and the page re-reads what it shows, a burst of them once.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { loadSession } from './session.js';

/** NodeEvent: a machine's online state (and, when it went offline, when it was last seen). */
export interface NodeEvent { id: string; online?: boolean; lastSeen?: string | null }
/** ListEvent: a machine added, changed or removed (id and change), or a user changed (neither). */
export interface ListEvent { id?: string; change?: 'added' | 'changed' | 'removed' }

export type LiveState = 'connecting' | 'live' | 'reconnecting' | 'stopped';

/** REREAD_DELAY_MS: changes arriving within this long of each other are read once (a policy change touches every machine). */
const REREAD_DELAY_MS = 250;

export interface LiveHandlers {
  node(e: NodeEvent): void;
  /** changed: machines changed (these events, once per burst), or anything may have (undefined: after a reconnect, a user's change). */
  changed(events: ListEvent[] | undefined): void;
}

/** useLive follows /admin/events while the page is shown; answers the connection's state for the page to show. */
export function useLive(handlers: LiveHandlers): LiveState {
  const ref = useRef(handlers);
  ref.current = handlers;
  const [state, setState] = useState<LiveState>('connecting');
  useEffect(() => {
    const source = new EventSource('/admin/events');
    let connected = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const pending: Array<ListEvent | undefined> = [];
    const later = (e: ListEvent | undefined) => {
      pending.push(e);
      timer ??= setTimeout(() => {
        timer = undefined;
        const all = pending.splice(0);
        // One call for the burst: "anything" when any event said so, else the machines' events.
        ref.current.changed(all.includes(undefined) ? undefined : all as ListEvent[]);
      }, REREAD_DELAY_MS);
    };
    const parse = (e: Event) => JSON.parse((e as MessageEvent<string>).data) as Record<string, unknown>;
    source.addEventListener('ready', () => {
      // A reconnect may have missed changes: re-read. The first connection follows the page's own first read.
      if (connected) later(undefined);
      connected = true;
      setState('live');
    });
    source.addEventListener('node', (e) => ref.current.node(parse(e) as unknown as NodeEvent));
    source.addEventListener('nodes', (e) => later(parse(e) as ListEvent));
    source.addEventListener('users', () => later(undefined));
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) { setState('reconnecting'); return; }
      setState('stopped');
      // The stream is refused when the session is over: then back to the sign-in page, as every other call does.
      loadSession().then((s) => { if (!s) location.assign('/admin/signin'); }, () => undefined);
    };
    return () => {
      source.close();
      if (timer) clearTimeout(timer);
    };
  }, []);
  return state;
}

/** LIVE_TEXT: what the page says of its live updates. */
export const LIVE_TEXT: Record<LiveState, string> = {
  connecting: 'Connecting to live updates…',
  live: 'Live',
  reconnecting: 'Live updates interrupted; reconnecting…',
  stopped: 'Live updates stopped: reload the page',
};
