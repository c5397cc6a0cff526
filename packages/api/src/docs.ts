import type Router from '@koa/router';
import type { Context } from 'koa';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { DOC_PATHS, type Api } from './openapi.js';

/*
 * The API reference page: Swagger UI from the swagger-ui-dist package, served by this
 * server from node_modules, so the page works offline and loads nothing from a CDN.
 * Why Swagger UI: one self-contained bundle with no runtime dependencies, no web fonts
 * or telemetry to fetch, OpenAPI 3.1 support, and it runs under a CSP without inline
 * scripts (its start-up code is the file served as init.js below).
 */

/** ASSETS are the only files served from swagger-ui-dist: nothing else in the package is reachable. */
const ASSETS: Record<string, string> = {
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'swagger-ui.css': 'text/css; charset=utf-8',
};

const INIT_JS = `'use strict';
window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({
    url: ${JSON.stringify(DOC_PATHS.document)},
    dom_id: '#swagger-ui',
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    defaultModelsExpandDepth: 1,
    displayOperationId: true,
  });
});
`;

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Headway API reference</title>
<link rel="stylesheet" href="${DOC_PATHS.page}/swagger-ui.css">
</head>
<body>
<noscript>The API reference needs JavaScript. The document itself is at <a href="${DOC_PATHS.document}">${DOC_PATHS.document}</a>.</noscript>
<div id="swagger-ui"></div>
<script src="${DOC_PATHS.page}/swagger-ui-bundle.js"></script>
<script src="${DOC_PATHS.page}/init.js"></script>
</body>
</html>
`;

/**
 * docsCsp allows scripts and styles from this server only (Swagger UI sets inline style
 * attributes, hence 'unsafe-inline' for styles) and API calls ("Try it out") to this
 * server and to server_url's origin.
 */
export function docsCsp(serverUrl?: string): string {
  let origin = '';
  try { origin = serverUrl ? new URL(serverUrl).origin : ''; } catch { origin = ''; }
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    `connect-src 'self'${origin ? ` ${origin}` : ''}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

interface Asset { type: string; plain: Buffer; gzip: Buffer }

/** swaggerUiDir finds the installed swagger-ui-dist package (its files are served as they are). */
function swaggerUiDir(): string {
  return dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
}

/**
 * mountApiDocs serves the OpenAPI documents (/api/v1's and /api/v2's) and the reference
 * page, unauthenticated: they describe the API, they hold no data. Documents are
 * rendered, and assets read and compressed, once, on first use.
 */
export function mountApiDocs(router: Router, opts: { document: (api: Api) => Record<string, unknown>; serverUrl?: string }): void {
  const csp = docsCsp(opts.serverUrl);
  const documentText = new Map<Api, string>();
  const cache = new Map<string, Asset>();
  const asset = (name: string, type: string, load: () => Buffer): Asset => {
    let a = cache.get(name);
    if (!a) {
      const plain = load();
      a = { type, plain, gzip: gzipSync(plain) };
      cache.set(name, a);
    }
    return a;
  };
  const send = (ctx: Context, a: Asset, maxAge: number) => {
    ctx.set('Content-Security-Policy', csp);
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    ctx.set('Cache-Control', `public, max-age=${maxAge}`);
    ctx.vary('Accept-Encoding');
    ctx.type = a.type;
    if (ctx.acceptsEncodings('gzip', 'identity') === 'gzip') {
      ctx.set('Content-Encoding', 'gzip');
      ctx.body = a.gzip;
    } else {
      ctx.body = a.plain;
    }
  };

  for (const [api, path] of [['v1', DOC_PATHS.document], ['v2', DOC_PATHS.v2Document]] as const) {
    router.get(path, (ctx) => {
      if (!documentText.has(api)) documentText.set(api, JSON.stringify(opts.document(api)));
      ctx.type = 'application/json';
      ctx.body = documentText.get(api);
    });
  }
  // headscale serves its API reference at /swagger; bookmarks and tools made for it land on this page.
  router.get(DOC_PATHS.swagger, (ctx) => {
    ctx.status = 308;
    ctx.redirect(DOC_PATHS.page);
  });
  router.get(DOC_PATHS.page, (ctx) => send(ctx, asset('page', 'text/html; charset=utf-8', () => Buffer.from(PAGE)), 300));
  router.get(`${DOC_PATHS.page}/init.js`, (ctx) => send(ctx, asset('init.js', 'text/javascript; charset=utf-8', () => Buffer.from(INIT_JS)), 300));
  for (const [name, type] of Object.entries(ASSETS)) {
    router.get(`${DOC_PATHS.page}/${name}`, (ctx) => send(ctx, asset(name, type, () => readFileSync(join(swaggerUiDir(), name))), 86_400));
  }
}
