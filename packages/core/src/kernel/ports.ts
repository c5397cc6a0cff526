import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { parseHostPort } from '../config/load.js';

/**
 * portHolder names the process listening on a local TCP port (or bound to a UDP port), where the system can
 * tell: Linux's /proc lists sockets by inode and each process's descriptors point at theirs. Another user's
 * process is invisible to a non-root server: then nothing is named.
 */
export function portHolder(port: number, protocol: 'tcp' | 'udp' = 'tcp'): string | undefined {
  const inodes = new Set<string>();
  for (const table of protocol === 'tcp' ? ['tcp', 'tcp6'] : ['udp', 'udp6']) {
    let text: string;
    try { text = readFileSync(`/proc/net/${table}`, 'utf8'); } catch { continue; }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is HEX_IP:HEX_PORT; a listening TCP socket has state 0A, a bound UDP one 07.
      if (f.length < 10 || parseInt(f[1]!.split(':')[1] ?? '', 16) !== port) continue;
      if (f[3] !== (protocol === 'tcp' ? '0A' : '07')) continue;
      inodes.add(f[9]!);
    }
  }
  if (!inodes.size) return undefined;
  let pids: string[];
  try { pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid); } catch { return undefined; }
  for (const pid of pids) {
    let fds: string[];
    try { fds = readdirSync(`/proc/${pid}/fd`); } catch { continue; }
    for (const fd of fds) {
      let target: string;
      try { target = readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { continue; }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (!m || !inodes.has(m[1]!)) continue;
      // The program's name from its command line: comm can be a thread's name (Node's main thread calls itself MainThread).
      let command = '';
      try { command = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!.split('/').pop() ?? ''; } catch { /* gone meanwhile */ }
      if (!command) try { command = readFileSync(`/proc/${pid}/comm`, 'utf8').trim(); } catch { /* gone meanwhile */ }
      return command ? `${command}, pid ${pid}` : `pid ${pid}`;
    }
  }
  return undefined;
}

/**
 * bindError turns a listen error into one line naming the key, the address and, for a port in use, who holds it.
 * The system's code (EADDRINUSE, EACCES, …) stays on the error as `code`, for callers that retry.
 */
export function bindError(key: string, addr: string, err: NodeJS.ErrnoException, protocol: 'tcp' | 'udp' = 'tcp', off?: string): NodeJS.ErrnoException {
  const withCode = (message: string) => Object.assign(new Error(message), { code: err.code });
  if (err.code !== 'EADDRINUSE') return withCode(`${key} ${addr}: ${err.message}`);
  const port = parseHostPort(addr)?.port;
  const holder = port ? portHolder(port, protocol) : undefined;
  const instead = off ? `; choose another port, or ${off}` : '; choose another port';
  return withCode(`${key} ${addr}: the address is already in use${holder ? ` (by ${holder})` : ''}${instead}`);
}

/** bindTcp opens a TCP listener on host:port (nothing serves it yet); its error names the key (see bindError). */
export function bindTcp(key: string, addr: string, off?: string): Promise<Server> {
  const hp = parseHostPort(addr);
  if (!hp) return Promise.reject(new Error(`${key} ${addr}: expected host:port`));
  const server = createServer({ pauseOnConnect: true });
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(bindError(key, addr, err, 'tcp', off)));
    server.listen(hp.port, hp.host, () => { server.removeAllListeners('error'); resolve(server); });
  });
}
