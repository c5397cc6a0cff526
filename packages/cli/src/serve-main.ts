import { configSearchPath, createLogger, formatProblem, loadConfig, nodeOptionsArgs, serverNodeFlags, type ConfigProblem, type HeadwayConfig, type Logger } from '@headway/core/ports';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import { buildInfo, CLI_ROOT, type BuildInfo } from './build-info.js';

/*
 * serve-main.ts runs the server for `headway serve`. The command parses its flags under oclif, then this process is
 * replaced (same PID) by one that runs this file directly with the server's V8 options: the long-running server
 * never loads the CLI framework.
 */

/** SERVE_ENTRY is this file: the process started again runs it as `node <options> serve-main.js serve [-c path]`. */
const SERVE_ENTRY = fileURLToPath(import.meta.url);

/** RunningServer is what startServer resolves to: close() stops listening and flushes state. */
interface RunningServer {
  close(): Promise<void>;
  urls?: Record<string, unknown>;
}

type StartServer = (opts: { config: HeadwayConfig; logger: Logger; configSource: string | null; build?: BuildInfo }) => Promise<RunningServer>;
/** ServerUrlCheck is core's serverUrlReachesThis: does server_url reach this running server? */
type ServerUrlCheck = (server: RunningServer) => Promise<{ reaches: boolean; why: string }>;

/**
 * logWriter sends `log.format: json` to standard output and text to standard error, as
 * headscale does: a log collector reading a container's stdout gets only JSON objects,
 * one per line, while a person at a terminal sees text on stderr. `serve` prints nothing
 * else, so neither stream mixes logs with other output.
 */
function logWriter(format: 'text' | 'json'): ((line: string) => void) | undefined {
  return format === 'json' ? (line) => process.stdout.write(line + '\n') : undefined;
}

/**
 * checkServerUrl warns that server_url names another port of this machine only when
 * server_url does not reach this very server (its /health answer names another server,
 * or nothing answers).
 */
async function checkServerUrl(check: ServerUrlCheck | undefined, server: RunningServer, held: ConfigProblem[], logger: Logger): Promise<void> {
  const result = check ? await check(server).catch(() => undefined) : undefined;
  if (result?.reaches) {
    logger.debug('server_url answers as this server', { why: result.why });
    return;
  }
  for (const p of held) logger.warn(`${formatProblem(p)}${result ? ` (${result.why})` : ''}`);
}

/**
 * restartWithNodeFlags replaces this process (same PID, so a service manager's signals still reach the server) with
 * one running the server's V8 options (serverNodeFlags): heap sizes can be set only when a process starts. Nothing
 * of the server is loaded yet. Returns false when there is nothing to do: the options are in force (the process
 * started again has them on its command line, so it is never started a third time) or given by the operator, or
 * the platform cannot replace a process (then the server runs with Node's defaults).
 */
function restartWithNodeFlags(config: HeadwayConfig, configPath: string | undefined): boolean {
  if (typeof process.execve !== 'function') return false;
  const given = [...process.execArgv, ...nodeOptionsArgs(process.env.NODE_OPTIONS)];
  const flags = serverNodeFlags(config, given, getHeapStatistics().heap_size_limit / 2 ** 20);
  if (flags.length === 0) return false;
  const args = [SERVE_ENTRY, 'serve', ...(configPath ? ['-c', configPath] : [])];
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...flags, ...args], process.env);
  return true;
}

/** runServe loads the configuration (the file at `configPath`, else the search path), starts the server and runs it until SIGTERM or SIGINT. */
export async function runServe(configPath: string | undefined): Promise<void> {
  const loadOpts = configPath ? { path: configPath } : {};
  const { config, source, problems } = loadConfig(loadOpts);
  // Before anything is logged, so the process started again says it once.
  if (!problems.some((p) => p.level !== 'warn') && restartWithNodeFlags(config, configPath)) return;
  const logger = createLogger({ level: config.log.level, format: config.log.format, write: logWriter(config.log.format) });
  // The warning that server_url names another port of this machine waits until the server listens:
  // a proxy or balancer there forwarding to this server is the intended address, not a mistake.
  const urlProblems = problems.filter((p) => p.code === 'server_url_port');
  for (const p of problems) {
    if (urlProblems.includes(p)) continue;
    if (p.level === 'fatal') logger.fatal(formatProblem(p));
    else if (p.level === 'error') logger.error(formatProblem(p));
    else logger.warn(formatProblem(p));
  }
  if (problems.some((p) => p.level !== 'warn')) {
    process.exitCode = 1;
    return;
  }
  if (source !== null) logger.info('config file loaded', { path: source });
  if (source === null) {
    logger.info(`no config file found (looked in ${configSearchPath(loadOpts).join(', ')}); using built-in defaults`);
  }

  logger.debug('Node options', { flags: process.execArgv.join(' ') });

  // Imported lazily so the admin commands never load the server's dependencies.
  const core = (await import('@headway/server')) as unknown as { startServer?: StartServer; serverUrlReachesThis?: ServerUrlCheck };
  if (typeof core.startServer !== 'function') {
    logger.fatal('this build of @headway/server has no startServer; rebuild the workspace');
    process.exitCode = 1;
    return;
  }
  let server: RunningServer;
  try {
    server = await core.startServer({ config, logger, configSource: source, build: buildInfo(CLI_ROOT) });
  } catch (e) {
    // A boot failure is reported as one line (no stack): it is usually configuration or environment.
    logger.fatal(e instanceof Error ? e.message : String(e));
    process.exitCode = 1;
    return;
  }
  if (urlProblems.length) void checkServerUrl(core.serverUrlReachesThis, server, urlProblems, logger);

  // SIGHUP is the reload signal (systemctl reload): policy.mode file re-reads its file on
  // it. Without a listener Node's default for SIGHUP ends the process, so one is always set.
  process.on('SIGHUP', () => {
    if (config.policy.mode !== 'file') logger.info(`received SIGHUP: nothing to reload (policy.mode ${config.policy.mode}; only file mode re-reads on it)`);
  });
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  logger.info(`received ${signal}, shutting down`);
  try {
    await server.close();
  } catch (e) {
    logger.error(`shutdown failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
  process.exit(0);
}

/** serveArgs reads the command line this file is started with: `serve [-c|--config path]`. */
export function serveArgs(argv: readonly string[]): { configPath?: string } | undefined {
  if (argv[0] !== 'serve') return undefined;
  const rest = argv.slice(1);
  if (rest.length === 0) return {};
  const m = /^(?:-c|--config)(?:=(.*))?$/.exec(rest[0]!);
  if (!m) return undefined;
  const configPath = m[1] ?? rest[1];
  return configPath && rest.length === (m[1] === undefined ? 2 : 1) ? { configPath } : undefined;
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(SERVE_ENTRY)) {
  const args = serveArgs(process.argv.slice(2));
  if (!args) {
    console.error(`usage: node ${SERVE_ENTRY} serve [-c path] (this is what \`headway serve\` runs)`);
    process.exit(2);
  }
  await runServe(args.configPath);
}
