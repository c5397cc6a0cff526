import { PassThrough } from 'node:stream';
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Change, ChangeBus, ConsoleSessions, Logger } from '@headway/core';
import { authenticateConsole, readCookie } from './auth.js';

/** HEARTBEAT_MS: a comment line this often keeps proxies (which drop idle connections after 30-60 s) from cutting the stream, and rechecks the session. */
export const HEARTBEAT_MS = 25_000;
/** STREAMS_PER_SESSION: a few tabs of one administrator; more is a leak or a loop, refused with 429. */
export const STREAMS_PER_SESSION = 4;
/** BACKLOG_BYTES: a client this far behind is cut off; its page reconnects and re-reads what it shows. */
const BACKLOG_BYTES = 1 << 20;
/** RETRY_MS: how long a browser waits before reconnecting a dropped stream (the `retry:` field). */
const RETRY_MS = 3000;

/** ConsoleEvent is one server-sent event: its name and its JSON data. */
export interface ConsoleEvent { event: 'node' | 'nodes' | 'users'; data: Record<string, unknown> }

/**
 * consoleEvent turns a change on the bus into what the console's pages need to know, or nothing:
 * `node` {id, online?, lastSeen?} when a machine goes on- or offline (the page updates that row in place),
 * `nodes` {id, change} when a machine was added, changed (name, tags, routes, expiry, owner) or removed (the page
 * re-reads the list), `users` {} when a user changed or went (owners' names). Endpoint and DERP moves say nothing.
 */
export function consoleEvent(change: Change): ConsoleEvent | undefined {
  switch (change.type) {
    case 'node-patch': {
      const p = change.patch;
      if (p.keyExpiry !== undefined || p.nodeKey !== undefined) return { event: 'nodes', data: { id: String(change.nodeId), change: 'changed' } };
      if (p.online === undefined && p.lastSeen === undefined) return undefined;
      const data: Record<string, unknown> = { id: String(change.nodeId) };
      if (p.online !== undefined) data.online = p.online;
      if (p.lastSeen !== undefined) data.lastSeen = p.lastSeen ? p.lastSeen.toISOString() : null;
      return { event: 'node', data };
    }
    case 'node-added': return { event: 'nodes', data: { id: String(change.node.id), change: 'added' } };
    case 'node-changed': return { event: 'nodes', data: { id: String(change.node.id), change: 'changed' } };
    case 'node-removed': return { event: 'nodes', data: { id: String(change.nodeId), change: 'removed' } };
    case 'user-changed':
    case 'user-removed': return { event: 'users', data: {} };
    default: return undefined;
  }
}

/** frame is an event in the text/event-stream format. */
function frame(e: ConsoleEvent): string {
  return `event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`;
}

export interface ConsoleEventsOptions {
  bus: ChangeBus;
  sessions: ConsoleSessions;
  secure: boolean;
  logger: Logger;
  /** heartbeatMs: default HEARTBEAT_MS (tests shorten it to see a session's end quickly). */
  heartbeatMs?: number;
}

/**
 * mountConsoleEvents serves GET /admin/events: a stream of server-sent events from the change bus to a signed-in
 * administrator's pages. The stream opens with `ready` (a page re-reads what it shows, since it may have missed
 * changes while disconnected), then carries consoleEvent's events and a heartbeat comment every heartbeatMs. It
 * ends when the session ends (checked at each heartbeat without moving its idle deadline: an open tab does not keep
 * a session alive), when the client falls BACKLOG_BYTES behind, or when the server closes its connections.
 * Answers: 401 without a session, 429 beyond STREAMS_PER_SESSION open streams of one session.
 */
export function mountConsoleEvents(router: Router, opts: ConsoleEventsOptions): void {
  const { bus, sessions, secure, logger } = opts;
  const heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_MS;
  const open = new Map<string, number>();
  router.get('/admin/events', async (ctx: Context) => {
    ctx.set('cache-control', 'no-store');
    const auth = await authenticateConsole(ctx, sessions, secure);
    if (!auth) {
      ctx.status = 401;
      ctx.body = { code: 'unauthorized', message: 'not signed in to the console' };
      return;
    }
    if ('status' in auth) {
      ctx.status = auth.status;
      ctx.body = { code: auth.code, message: auth.message };
      return;
    }
    const { admin, csrf: key } = auth.session;
    const count = open.get(key) ?? 0;
    if (count >= STREAMS_PER_SESSION) {
      ctx.status = 429;
      ctx.body = { code: 'too_many_streams', message: `this session already has ${count} event streams open (the limit is ${STREAMS_PER_SESSION}); close another console tab` };
      return;
    }
    open.set(key, count + 1);
    const cookie = readCookie(ctx, secure);
    const stream = new PassThrough();
    let ended = false;
    const send = (text: string) => {
      if (ended) return;
      if (stream.writableLength > BACKLOG_BYTES) { end('the client fell behind'); return; }
      stream.write(text);
    };
    const unsubscribe = bus.subscribe((change) => {
      const e = consoleEvent(change);
      if (e) send(frame(e));
    });
    const heartbeat = setInterval(() => {
      sessions.peek(cookie).then((s) => {
        if (!s) end('the session ended');
        else send(': heartbeat\n\n');
      }, (err: unknown) => logger.warn('console events: session check failed', { error: (err as Error).message }));
    }, heartbeatMs);
    heartbeat.unref();
    function end(why?: string) {
      if (ended) return;
      ended = true;
      clearInterval(heartbeat);
      unsubscribe();
      const left = (open.get(key) ?? 1) - 1;
      if (left > 0) open.set(key, left); else open.delete(key);
      if (why) logger.debug('console events: stream ended', { admin, why });
      stream.end();
    }
    // The response's close: the client went, or the server destroyed the connection at shutdown.
    ctx.res.on('close', () => end());
    ctx.req.socket.setTimeout(0);
    ctx.req.socket.setNoDelay(true);
    ctx.status = 200;
    ctx.type = 'text/event-stream; charset=utf-8';
    ctx.set('x-accel-buffering', 'no');
    ctx.body = stream;
    stream.write(`retry: ${RETRY_MS}\nevent: ready\ndata: {}\n\n`);
  });
}
