/** The REST API's resource shapes (camelCase, ids as strings, times RFC 3339), as the server sends them. */

export interface ApiUser {
  id: string;
  name: string;
  displayName?: string;
  email?: string;
  createdAt?: string;
  provider?: string;
  providerId?: string;
  profilePicUrl?: string;
  groups?: string[];
}

export type RegisterMethod =
  | 'REGISTER_METHOD_AUTH_KEY'
  | 'REGISTER_METHOD_CLI'
  | 'REGISTER_METHOD_API'
  | 'REGISTER_METHOD_DEBUG'
  | string;

export interface ApiNode {
  id: string;
  machineKey: string;
  nodeKey: string;
  discoKey?: string;
  ipAddresses: string[];
  /** name is the hostname the device reported. */
  name: string;
  /** givenName is the DNS label the tailnet uses (admin-renamable). */
  givenName: string;
  user: ApiUser | null;
  lastSeen?: string | null;
  expiry?: string | null;
  createdAt?: string;
  registerMethod?: RegisterMethod;
  tags: string[];
  online: boolean;
  approvedRoutes: string[];
  availableRoutes: string[];
  /** subnetRoutes are the routes both approved and primary on this node. */
  subnetRoutes: string[];
  ephemeral?: boolean;
}

export interface ApiPreAuthKey {
  id: string;
  /** key is the redacted `hwkey-auth-<prefix>-***` form, except in the create response. */
  key: string;
  user: ApiUser | null;
  reusable: boolean;
  ephemeral: boolean;
  used: boolean;
  expiration?: string | null;
  createdAt?: string;
  aclTags: string[];
}

export interface ApiKeyInfo {
  id: string;
  prefix: string;
  expiration?: string | null;
  createdAt?: string;
  lastSeen?: string | null;
}

/** ApiProblem is an RFC 7807 problem document as the server returns for every failure. */
export interface ApiProblem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  field?: string;
  /** errors lists every problem found when there are several (an invalid policy). */
  errors?: string[];
}
