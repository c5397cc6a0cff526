import { ROUTES } from './routes.js';

/**
 * openApiDocument is generated from the route table itself, so the document and
 * the router cannot disagree about which routes exist.
 */
export function openApiDocument(): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of ROUTES) {
    const path = r.path.replace(/:([A-Za-z]+)/g, '{$1}');
    const params = [...r.path.matchAll(/:([A-Za-z]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
    const query = Object.entries(r.query ?? {}).map(([name, description]) => ({ name, in: 'query', required: false, description, schema: { type: 'string' } }));
    const op: Record<string, unknown> = {
      summary: r.summary,
      operationId: `${r.method.toLowerCase()}${path.replace(/[{}]/g, '').split('/').filter(Boolean).map((s) => s[0]!.toUpperCase() + s.slice(1)).join('')}`,
      security: [{ bearer: [] }],
      parameters: [...params, ...query],
      responses: {
        200: { description: r.response, content: { 'application/json': { schema: { type: 'object' } } } },
        400: { $ref: '#/components/responses/Problem' },
        401: { $ref: '#/components/responses/Problem' },
        404: { $ref: '#/components/responses/Problem' },
      },
    };
    if (r.body) {
      op.requestBody = {
        required: false,
        content: { 'application/json': { schema: { type: 'object', properties: Object.fromEntries(Object.entries(r.body).map(([k, d]) => [k, { description: d }])) } } },
      };
    }
    (paths[path] ??= {})[r.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Headway API', version: '1', description: 'Administration API of a Headway coordination server (headscale v1 compatible paths).' },
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'An API key from `headway apikeys create`' } },
      responses: {
        Problem: {
          description: 'RFC 7807 problem',
          content: { 'application/problem+json': { schema: { type: 'object', properties: { type: { type: 'string' }, title: { type: 'string' }, status: { type: 'integer' }, detail: { type: 'string' }, code: { type: 'string' }, field: { type: 'string' } } } } },
        },
      },
    },
  };
}
