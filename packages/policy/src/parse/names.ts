import type { Pos } from '../hujson.js';
import type { Alias, ParseOptions, Policy } from '../policy.js';
import { didYouMean, err, suggester } from './reader.js';

/**
 * NameChecks are the checks that a name a rule uses (tag, group, host) is one the policy defines, with a hint at
 * the defined name it was likely meant to be. Made once the definitions are read (nameChecks).
 */
export interface NameChecks {
  /** nearTag is the did-you-mean hint for an undefined tag, or ''. */
  nearTag(name: string): string;
  checkTag(name: string, at: Pos | undefined, prefix: string): void;
  /** checkSource: autogroups that name no sender are refused on the src side of acls and grants. */
  checkSource(a: Alias, at: Pos | undefined): void;
  checkAlias(a: Alias, at: Pos | undefined, side: string): void;
}

/** nameChecks checks names against pol's groups, hosts and tagOwners, which must be read in full by now. */
export function nameChecks(pol: Policy, opts: ParseOptions): NameChecks {
  // The defined names are listed once, when a hint first needs them.
  let tagNames: string[] | undefined;
  let groupNames: string[] | undefined;
  let hostNames: string[] | undefined;
  const nearTag = (name: string) => didYouMean('tag', name, () => (tagNames ??= Object.keys(pol.tagOwners)), 'tag:');
  const nearGroup = (name: string) => didYouMean('group', name, () => (groupNames ??= Object.keys(pol.groups).filter((g) => g.startsWith('group:'))), 'group:');
  const checkTag = (name: string, at: Pos | undefined, prefix: string) => {
    if (!(name in pol.tagOwners)) err(`${prefix}tag not found: ${JSON.stringify(name)}${nearTag(name)}`, at);
  };
  const checkSource = (a: Alias, at: Pos | undefined) => {
    if (a.kind === 'autogroup' && a.name === 'autogroup:self') err('"autogroup:self" not valid on the src side of a rule', at);
    // The internet sends no packets a node's filter could name (every public range would become a source).
    if (a.kind === 'autogroup' && a.name === 'autogroup:internet') err('autogroup:internet can only be used in ACL destinations', at);
  };
  const checkAlias = (a: Alias, at: Pos | undefined, side: string) => {
    if (a.kind === 'tag') checkTag(a.name, at, side === 'src' ? 'src=' : '');
    if (a.kind === 'host' && !(a.name in pol.hosts)) err(hostNotFound(a.name, () => (hostNames ??= Object.keys(pol.hosts)), opts.userNames), at);
    if (a.kind === 'group' && !(a.name in pol.groups)) err(`group ${JSON.stringify(a.name)} not found${nearGroup(a.name)}`, at);
  };
  return { nearTag, checkTag, checkSource, checkAlias };
}

/**
 * hostNotFound explains a bare name that is neither a host nor anything else: a user is
 * written with a trailing "@" (`alice@`), a common slip in `"alice:80"`. When the live
 * users are known and one has that name, the hint says so plainly; otherwise a host the
 * policy defines a slip away ("webservr" for "webserver") is named, then such a user.
 */
function hostNotFound(name: string, hosts: () => string[], userNames: string[] | undefined): string {
  const base = `host ${JSON.stringify(name)} not found`;
  if (userNames?.some((u) => u.toLowerCase() === name.toLowerCase())) return `${base}; did you mean the user "${name}@"?`;
  const host = didYouMean('host', name, hosts);
  if (host) return base + host;
  const user = userNames ? suggester().closest('user', name, () => userNames) : undefined;
  if (user !== undefined) return `${base}; did you mean the user ${JSON.stringify(`${user}@`)}?`;
  return `${base} (define it under "hosts", or write "${name}@" for a user named ${name})`;
}
