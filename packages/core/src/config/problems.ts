/** ConfigProblem is one finding: `error` and `fatal` stop the server, `warn` does not. */
export interface ConfigProblem {
  level: 'fatal' | 'error' | 'warn';
  key: string;
  message: string;
  /**
   * code marks a kind of finding: `not_implemented` is a headscale key Headway accepts but does not act on
   * (`config check --strict` fails on it); `server_url_port` is the wrong-port warning of checkServerUrl, which
   * `headway serve` holds back until it has asked server_url whether it reaches this server; `headscale_default` is a
   * key a config written for headscale leaves out whose default differs from headscale's.
   */
  code?: 'not_implemented' | 'server_url_port' | 'headscale_default';
}

/** ConfigError carries every problem found, so a check can print them all at once. */
export class ConfigError extends Error {
  constructor(readonly problems: ConfigProblem[]) {
    super(problems.filter((p) => p.level !== 'warn').map(formatProblem).join('\n'));
    this.name = 'ConfigError';
  }
}

export function formatProblem(p: ConfigProblem): string {
  return p.key ? `${p.key}: ${p.message}` : p.message;
}
