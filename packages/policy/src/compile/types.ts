import type { PortRange } from '../policy.js';

/** What the compiler reads (a tailnet snapshot) and what it gives each node (tailcfg's shapes). */

export interface PolicyUser {
  id: string;
  name: string;
  email?: string;
  /**
   * groups are the user's identity-provider groups, present only when the server
   * lets policy groups name them (oidc.policy_groups): `group:NAME` then also holds
   * every user whose groups include NAME.
   */
  groups?: string[];
}

export interface PolicyNode {
  id: string;
  /** name is the node's display name (unique in the tailnet). */
  name: string;
  /** userId is absent for tagged-only nodes. */
  userId?: string;
  tags: string[];
  ipv4?: string;
  ipv6?: string;
  /** availableRoutes are what the node advertises (Hostinfo.RoutableIPs). */
  availableRoutes: string[];
  /** approvedRoutes are what an admin approved, before autoApprovers. */
  approvedRoutes: string[];
  online?: boolean;
}

export interface Snapshot {
  users: PolicyUser[];
  nodes: PolicyNode[];
}

export interface NetPortRange {
  IP: string;
  Ports: PortRange;
}

export interface CapGrant {
  Dsts: string[];
  CapMap: Record<string, unknown[] | null>;
}

/** FilterRule is tailcfg.FilterRule as sent in MapResponse.PacketFilter. */
export interface FilterRule {
  SrcIPs: string[];
  DstPorts?: NetPortRange[];
  IPProto?: number[];
  CapGrant?: CapGrant[];
}

export interface SSHPrincipal {
  nodeIP: string;
}

/** SSHAction is tailcfg.SSHAction: what a device's SSH server does with a connection (compiled rules and /machine/ssh/action answers). */
export interface SSHAction {
  /** message is shown to the person connecting (an SSH banner). */
  message?: string;
  reject?: boolean;
  accept?: boolean;
  allowAgentForwarding?: boolean;
  allowLocalPortForwarding?: boolean;
  allowRemotePortForwarding?: boolean;
  holdAndDelegate?: string;
  sessionDuration?: number;
}

export interface SSHRule {
  principals: SSHPrincipal[];
  sshUsers: Record<string, string>;
  action: SSHAction;
  acceptEnv?: string[];
}

export interface CompiledNode {
  packetFilter: FilterRule[];
  sshPolicy: { rules: SSHRule[] } | null;
  capMap: Record<string, unknown[] | null>;
  /** peers: the ids of the nodes this one may see, in tailnet order (compilePolicy computes it on each read). */
  readonly peers: string[];
  approvedRoutes: string[];
  randomizeClientPort: boolean;
}

/** ALLOW_ALL is the filter used when there is no policy (or no acls/grants at all). */
export const ALLOW_ALL: FilterRule[] = [{ SrcIPs: ['*'], DstPorts: [{ IP: '*', Ports: { First: 0, Last: 65535 } }] }];

/** CHECK_HOLD_URL is where clients are sent for `check` SSH rules; node ids are filled by the client. */
export const CHECK_HOLD_URL = '/machine/ssh/action/$SRC_NODE_ID/to/$DST_NODE_ID?local_user=$LOCAL_USER';
