export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
export type LogFields = Record<string, unknown>;

export interface Logger {
  trace(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  fatal(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const ORDER: Record<LogLevel, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 };
const LABEL: Record<LogLevel, string> = { trace: 'TRC', debug: 'DBG', info: 'INF', warn: 'WRN', error: 'ERR', fatal: 'FTL' };

/** Field names whose values are never written, whatever the level: secrets stay out of logs. */
const REDACTED = /(^|_|-)(key|secret|password|pass|token|authorization|authkey)$/i;

function redact(fields: LogFields): LogFields {
  const out: LogFields = {};
  for (const [k, v] of Object.entries(fields)) {
    out[k] = REDACTED.test(k) && !/(^|_)(machine|node|disco)_?key$/i.test(k) && !/prefix/i.test(k) ? '[redacted]' : v;
  }
  return out;
}

function formatValue(v: unknown): string {
  if (v instanceof Error) return JSON.stringify(v.message);
  if (typeof v === 'string') return /[\s"=]/.test(v) ? JSON.stringify(v) : v;
  return JSON.stringify(v);
}

export interface LoggerOptions {
  level?: LogLevel;
  format?: 'text' | 'json';
  write?: (line: string) => void;
}

/**
 * createLogger writes one line per event to stderr (or `write`), as text
 * (`2026-01-01T00:00:00Z INF message key=value`) or JSON; fields named like secrets are redacted.
 */
export function createLogger(opts: LoggerOptions = {}, bound: LogFields = {}): Logger {
  const min = ORDER[opts.level ?? 'info'];
  const write = opts.write ?? ((line: string) => process.stderr.write(line + '\n'));
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (ORDER[level] < min) return;
    const all = redact({ ...bound, ...fields });
    const time = new Date().toISOString();
    if (opts.format === 'json') {
      write(JSON.stringify({ time, level, msg, ...Object.fromEntries(Object.entries(all).map(([k, v]) => [k, v instanceof Error ? v.message : v])) }));
    } else {
      const rest = Object.entries(all).map(([k, v]) => `${k}=${formatValue(v)}`).join(' ');
      write(`${time} ${LABEL[level]} ${msg}${rest ? ' ' + rest : ''}`);
    }
  };
  return {
    trace: (m, f) => emit('trace', m, f),
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    fatal: (m, f) => emit('fatal', m, f),
    child: (f) => createLogger(opts, { ...bound, ...f }),
  };
}

/** silentLogger discards everything (tests that do not inspect logs). */
export const silentLogger: Logger = createLogger({ write: () => undefined, level: 'fatal' });
