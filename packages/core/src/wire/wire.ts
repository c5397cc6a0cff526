/** Wire shapes of the control protocol (Go field names, see tailcfg). Only what the server reads or writes. */

/** Hostinfo, RegisterRequest and MapRequest are what validate.ts's schemas return: checked, with nulls dropped. */
export type { Hostinfo, MapRequest, RegisterRequest } from './validate.js';

export interface RegisterResponse {
  User?: { ID: number; DisplayName: string; ProfilePicURL: string; Created: string };
  Login?: { ID: number; Provider: string; LoginName: string; DisplayName: string; ProfilePicURL: string };
  NodeKeyExpired: boolean;
  MachineAuthorized: boolean;
  AuthURL: string;
  Error: string;
}

/** MIN_CAPABILITY_VERSION is Tailscale 1.80; newer versions are never refused. */
export const MIN_CAPABILITY_VERSION = 113;

export { TAGGED_USER_ID } from '../domain.js';

/** Go's zero time: Tailscale sends it for "unset". */
export function isZeroTime(s: string | undefined): boolean {
  return !s || s.startsWith('0001-01-01');
}
