export { PolicyError, parseHuJSON, toPlain, listErrors, MAX_LISTED_ERRORS, type JNode, type Pos } from './hujson.js';
export { IPSet, parseAddr, parsePrefix, formatAddr, TAILNET_WILDCARD, INTERNET, ALL, type Addr, type IPRange } from './ip.js';
export {
  parseIP, formatIP, parseIPPrefix, mask, formatPrefix, prefixSize, prefixLast, prefixContains, prefixOverlaps,
  canonicalPrefix, EXIT_ROUTES, isExitRoute, type IPAddr, type Prefix,
} from './ip.js';
export {
  parsePolicy, checkPolicy, parseAlias, parsePortList, parseGoDuration, formatGoDuration,
  type Policy, type Alias, type AclRule, type Grant, type SshRule, type NodeAttr, type PolicyTest,
  type SshPolicyTest, type PortRange, type ProtoPorts, type ParseOptions,
} from './policy.js';
export {
  compilePolicy, approvedRoutesOf, peerListOf, primaryRoutes, sshCheckPeriodMs, SSH_CHECK_PERIOD_DEFAULT_MS, TailnetContext, offerContext, preparedContext, ALLOW_ALL, CHECK_HOLD_URL,
  type PolicyUser, type PolicyNode, type Snapshot, type FilterRule, type NetPortRange, type CapGrant,
  type SSHRule, type SSHPrincipal, type SSHAction, type CompiledNode,
} from './compile.js';
export { runPolicyTests, policyTestResults, filterAllows, ruleSources, type PolicyTestResult } from './tests.js';
export { nodeReach, type NodeReach, type ReachEntry } from './reach.js';
export { policyWarnings, userReferences, userReferenceWarnings } from './warnings.js';
export {
  previewPolicy, previewNodes, topologySnapshot, tailnetDomainsOf,
  type Topology, type PreviewOptions, type PreviewResult, type PreviewNode, type PreviewNodeView,
} from './preview.js';
export { drivePolicy, mergeCompiled, CAP_DRIVE, type DriveRule } from './drive.js';
export { previewMatches, parseIpPort, type RuleMatch, type MatchQuery } from './matches.js';
