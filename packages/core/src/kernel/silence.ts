import type http from 'node:http';
import type { Socket } from 'node:net';

interface Waiting { socket: Socket; timer: NodeJS.Timeout; onClose: () => void }

/**
 * closeSilentConnections bounds how long a connection on an HTTP listener may go without a complete request:
 * from TCP accept, and from the end of each response on a kept-alive connection, to the next request's last
 * header line (or an upgrade), at most `deadline` ms; past it the connection is destroyed. Node's own
 * headersTimeout is checked only every connectionsCheckingInterval (30 s), so a half-sent request would hold a
 * socket 60 to 90 s; this timer is exact. Every TCP listener takes its deadline from noise.handshake_timeout
 * (listen_addr and metrics_listen_addr), so one setting decides how long a half-sent request is held.
 * 0 turns it off. A request's body is not covered: requestTimeout and the routes' own limits bound that.
 */
export function closeSilentConnections(server: http.Server, deadline: number): void {
  if (deadline <= 0) return;
  // Keyed by peer address and port: with TLS, 'connection' sees the TCP socket, requests the TLS one.
  // Only this map holds a timer: a listener closing over it would keep a cleared timer for as long as
  // the connection lives (each idle device's).
  const waiting = new Map<string, Waiting>();
  // open counts each connection's requests whose response has not ended (pipelined requests overlap).
  const open = new Map<string, number>();
  const peer = (s: { remoteAddress?: string; remotePort?: number }) => `${s.remoteAddress}|${s.remotePort}`;
  const stop = (key: string) => {
    const w = waiting.get(key);
    if (!w) return;
    clearTimeout(w.timer);
    w.socket.off('close', w.onClose);
    waiting.delete(key);
  };
  const arm = (key: string, socket: Socket) => {
    stop(key);
    const timer = setTimeout(() => { waiting.delete(key); open.delete(key); socket.destroy(); }, deadline);
    timer.unref();
    const onClose = (): void => {
      const w = waiting.get(key);
      if (w?.socket === socket) { clearTimeout(w.timer); waiting.delete(key); }
      open.delete(key);
    };
    waiting.set(key, { socket, timer, onClose });
    socket.once('close', onClose);
  };
  server.on('connection', (socket: Socket) => arm(peer(socket), socket));
  server.prependListener('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const key = peer(req.socket);
    stop(key);
    open.set(key, (open.get(key) ?? 0) + 1);
    res.once('close', () => {
      const left = (open.get(key) ?? 1) - 1;
      if (left > 0) { open.set(key, left); return; }
      open.delete(key);
      // Kept alive: the next request must arrive, headers complete, within the deadline too.
      const socket = req.socket as Socket;
      if (!socket.destroyed && !socket.readableEnded) arm(key, socket);
    });
  });
  server.prependListener('upgrade', (req: http.IncomingMessage) => {
    const key = peer(req.socket);
    stop(key);
    open.delete(key);
  });
}
