/**
 * The IP library of Headway, in three parts: addresses and ranges as the policy writes them (ip/addr.ts), sets
 * of ranges (ip/set.ts), and the server's prefix arithmetic (ip/prefix.ts).
 */
export {
  parseAddr, parseAddrText, formatAddr, formatAddrText, parsePrefix, parseRangeText, prefixRange, rangeToPrefixes,
  type Addr, type IPRange,
} from './ip/addr.js';
export { IPSet, parseSetText, ALL, TAILNET_WILDCARD, INTERNET } from './ip/set.js';
export {
  parseIP, formatIP, parseIPPrefix, mask, formatPrefix, prefixSize, prefixLast, prefixContains, prefixOverlaps,
  canonicalPrefix, EXIT_ROUTES, isExitRoute, type IPAddr, type Prefix,
} from './ip/prefix.js';
