import { readFileSync, watch } from 'node:fs';
import { DRIVE, DRIVE_SHARE_NAME, type AdapterDescriptor, type DriveDestination, type DriveGrant, type DrivePort, type DriveSource } from '@headway/core/ports';

/**
 * FileDriveGrants reads Taildrive grants from a JSON file an operator keeps
 * (under version control, say) and re-reads it when it changes:
 *
 *   { "grants": [ { "src": "group:eng", "dst": "tag:nas", "shares": ["docs"], "access": "ro" } ] }
 *
 * Ends are policy groups and tags, which are names; users and nodes reach the
 * drive port as ids, which a file cannot know (use `headway drive grant` for
 * those). A file Headway cannot read or that holds a bad grant throws with its
 * path and the grant's index: at start-up that stops the server, after a
 * change Headway keeps the grants it had and logs the error.
 */
export class FileDriveGrants implements DrivePort {
  constructor(private readonly path: string) {}

  async grants(): Promise<DriveGrant[]> {
    let doc: unknown;
    try {
      doc = JSON.parse(readFileSync(this.path, 'utf8'));
    } catch (err) {
      throw new Error(`${this.path}: ${(err as Error).message}`);
    }
    const list = (doc as { grants?: unknown })?.grants;
    if (!Array.isArray(list)) throw new Error(`${this.path}: expected {"grants": [...]}`);
    return list.map((g: unknown, i) => parseGrant(g, `${this.path}: grants[${i}]`));
  }

  watch(onChange: () => void): () => void {
    const w = watch(this.path, () => onChange());
    return () => w.close();
  }
}

function end(text: unknown, where: string, kinds: Array<'group' | 'tag'>): DriveSource {
  if (typeof text === 'string') {
    for (const kind of kinds) if (new RegExp(`^${kind}:[\\w.-]+$`).test(text)) return { kind, name: text };
  }
  throw new Error(`${where}: expected ${kinds.map((k) => `${k}:NAME`).join(' or ')}, found ${JSON.stringify(text)}`);
}

function parseGrant(g: unknown, where: string): DriveGrant {
  if (!g || typeof g !== 'object') throw new Error(`${where}: expected {src, dst, shares, access}`);
  const { src, dst, shares = ['*'], access = 'ro' } = g as Record<string, unknown>;
  if (!Array.isArray(shares) || !shares.length || shares.some((s) => typeof s !== 'string' || !DRIVE_SHARE_NAME.test(s))) {
    throw new Error(`${where}.shares: expected share names (a-z, 0-9, _, (, ), spaces) or "*", found ${JSON.stringify(shares)}`);
  }
  if (access !== 'ro' && access !== 'rw') throw new Error(`${where}.access: expected "ro" or "rw", found ${JSON.stringify(access)}`);
  return {
    src: end(src, `${where}.src`, ['group', 'tag']),
    dst: end(dst, `${where}.dst`, ['tag']) as DriveDestination,
    shares: shares as string[],
    access,
  };
}

/** DriveFileOptions are this plugin's `options:` in its `plugins:` entry. */
export interface DriveFileOptions {
  /** file is the JSON file holding the grants. */
  file: string;
}

const descriptor: AdapterDescriptor<DriveFileOptions> = {
  port: 'drive',
  id: 'drive-file',
  // validate names every bad option; Headway runs it at start-up and in `headway config check`.
  validate(options) {
    const problems = [];
    for (const key of Object.keys(options)) {
      if (key !== 'file') problems.push({ option: key, message: 'unknown option (this plugin takes: file)' });
    }
    if (options.file === undefined) problems.push({ option: 'file', message: 'required: the JSON file of drive grants' });
    else if (typeof options.file !== 'string' || !options.file) problems.push({ option: 'file', message: `expected a file path, found ${JSON.stringify(options.file)}` });
    return problems;
  },
  register({ container, options }) {
    const plugin = new FileDriveGrants(options!.file);
    container.register(DRIVE, { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;
