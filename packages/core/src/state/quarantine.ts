import type { Node, NodePatch } from '../domain.js';
import type { Logger } from '../log.js';
import type { StoragePort } from '../ports/storage.js';
import { isEndpointList, isHostinfo } from '../wire/validate.js';

/**
 * quarantine repairs a node row that cannot be served as stored, so one bad row
 * never stops start-up: fields the reader could not decode (`damaged`), and a
 * Hostinfo or endpoint list that fails the protocol schemas (peers' Go decoders
 * would reject their whole netmap). Those fields get safe defaults (no Hostinfo,
 * no endpoints or routes, an expiry in the past), written back, with an ERR line
 * naming the node; the device re-sends its Hostinfo and endpoints on its next map.
 */
export async function quarantine(storage: StoragePort, logger: Logger, n: Node): Promise<Node> {
  const { damaged, ...node } = n;
  const fields = new Set(damaged ?? []);
  if (node.hostinfo !== null && !isHostinfo(node.hostinfo)) fields.add('hostinfo');
  if (!isEndpointList(node.endpoints)) fields.add('endpoints');
  if (!fields.size) return n;
  const repair: NodePatch = {};
  if (fields.has('hostinfo')) repair.hostinfo = null;
  if (fields.has('endpoints')) repair.endpoints = [];
  if (fields.has('tags')) repair.tags = [];
  if (fields.has('availableRoutes')) repair.availableRoutes = [];
  if (fields.has('approvedRoutes')) repair.approvedRoutes = [];
  if (fields.has('expiry')) repair.expiry = node.expiry;
  if (fields.has('lastSeen')) repair.lastSeen = null;
  logger.error('node row quarantined: unreadable or invalid fields reset to safe defaults', {
    node: node.id, name: node.givenName, fields: [...fields].join(','),
  });
  try {
    const fixed = await storage.nodes.update(node.id, repair);
    if (fixed) {
      const { damaged: _still, ...clean } = fixed;
      return clean;
    }
  } catch (err) {
    logger.error('node row quarantine could not be written back; serving the defaults from memory', {
      node: node.id, error: err instanceof Error ? err.name : 'error',
    });
  }
  return { ...node, ...repair };
}
