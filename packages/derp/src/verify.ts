import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { parseNodeKey } from './keys.js';
import type { VerifyClient } from './server.js';

/** DerpAdmitClientRequest mirrors tailcfg.DERPAdmitClientRequest, the body derper POSTs to --verify-client-url. */
export interface DerpAdmitClientRequest {
  /** NodePublic is the client's node key, `nodekey:<hex>`. */
  NodePublic: string;
  /** Source is the client's IP address as derper saw it (may be empty). */
  Source?: string;
}

/** DerpAdmitClientResponse mirrors tailcfg.DERPAdmitClientResponse. */
export interface DerpAdmitClientResponse {
  Allow: boolean;
}

/** VerifyRequestError is a client fault in a /verify request; status is the HTTP code to answer with. */
export class VerifyRequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** MAX_VERIFY_BODY_BYTES caps the unauthenticated /verify body; a real request is about 100 bytes. */
export const MAX_VERIFY_BODY_BYTES = 4096;

/**
 * parseAdmitRequest validates a /verify body. Unknown fields (e.g. a
 * DiscoPublic some proxies add) are ignored, as Go's decoder ignores them.
 */
export function parseAdmitRequest(body: string | Buffer): DerpAdmitClientRequest {
  let json: unknown;
  try {
    json = JSON.parse(body.toString());
  } catch {
    throw new VerifyRequestError(400, 'request body must be JSON');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new VerifyRequestError(400, 'request body must be a JSON object');
  const raw = json as Record<string, unknown>;
  if (typeof raw.NodePublic !== 'string') throw new VerifyRequestError(400, 'NodePublic must be a string "nodekey:<64 hex>"');
  try {
    parseNodeKey(raw.NodePublic);
  } catch (err) {
    throw new VerifyRequestError(400, `NodePublic: ${(err as Error).message}`);
  }
  const out: DerpAdmitClientRequest = { NodePublic: raw.NodePublic.toLowerCase() };
  if (raw.Source !== undefined && raw.Source !== null && raw.Source !== '') {
    if (typeof raw.Source !== 'string' || isIP(raw.Source) === 0) throw new VerifyRequestError(400, 'Source must be an IP address string');
    out.Source = raw.Source;
  }
  return out;
}

/** answerAdmitRequest runs the admission predicate for a parsed request. */
export async function answerAdmitRequest(request: DerpAdmitClientRequest, predicate: VerifyClient): Promise<DerpAdmitClientResponse> {
  const info = request.Source ? { transport: 'verify' as const, remoteAddress: request.Source } : { transport: 'verify' as const };
  return { Allow: (await predicate(request.NodePublic, info)) === true };
}

/**
 * verifyHandler builds the control server's `POST /verify` handler, which
 * external derpers call to admit clients, using the same predicate as the
 * embedded relay's verifyClient.
 */
export function verifyHandler(predicate: VerifyClient): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    try {
      if (req.method !== 'POST') throw new VerifyRequestError(405, 'method not allowed; use POST');
      const body = await readBody(req, MAX_VERIFY_BODY_BYTES);
      const answer = await answerAdmitRequest(parseAdmitRequest(body), predicate);
      sendJson(res, 200, answer);
    } catch (err) {
      if (err instanceof VerifyRequestError) {
        if (err.status === 405) res.setHeader('Allow', 'POST');
        sendJson(res, err.status, { error: err.message });
      } else {
        sendJson(res, 500, { error: 'admission check failed' });
      }
    }
  };
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        reject(new VerifyRequestError(413, `request body over ${limit} bytes`));
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}
