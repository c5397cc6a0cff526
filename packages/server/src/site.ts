import type Router from '@koa/router';
import type { Context } from 'koa';
import { APPLE_PLATFORMS, appleProfile, applePage, isApplePlatform, STATIC_PAGE_HEADERS, windowsPage } from '@headway/control';

/*
 * The plain pages and files headscale serves beside the protocol, at its paths: /robots.txt, /favicon.ico,
 * /version, and the onboarding pages /apple, /apple/{platform} (configuration profiles) and /windows.
 */

/** BuildInfo names the running build for /version. */
export interface BuildInfo {
  version: string;
  /** commit is `git describe` of the source (`-dirty` with local changes), or `unknown`. */
  commit: string;
}

/** FAVICON is Headway's 32 px icon: three points joined by a path, white on blue (PNG, as headscale serves its own). */
const FAVICON = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAYAAABzenr0AAAAgklEQVR42u3XMQ6AMAxD0ezckkP3OrBTlFLjmFSkEiv/iYEmZs7Z9nYwHps5rCiEiY67CFX8FqGOd4h/AyJefD0uIjo+QhTAFHEJAIm/AqBBCoAVpwOgn9FyAObnnwaw40NARPAxQBGHAPQruQCswSLdVFRDafrdIN9qlmI5/WI9PwEScR5QfBIXGQAAAABJRU5ErkJggg==', 'base64');

/** GO_ARCH names Node's architectures as Go does, so /version reads like headscale's. */
const GO_ARCH: Record<string, string> = { x64: 'amd64', ia32: '386', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64', loong64: 'loong64' };

/**
 * versionInfo is /version's body: headscale's shape ({version, commit, buildTime, go, dirty}), where `go` names
 * the runtime that runs the server (Node here) and its system and architecture.
 */
export function versionInfo(build: BuildInfo): Record<string, unknown> {
  return {
    version: build.version,
    commit: build.commit,
    buildTime: 'unknown',
    go: { version: `node${process.versions.node}`, os: process.platform, arch: GO_ARCH[process.arch] ?? process.arch },
    dirty: build.commit.endsWith('-dirty'),
  };
}

/** mountSite adds the pages and files to the main listener's router. */
export function mountSite(router: Router, o: { serverUrl: string; build: BuildInfo }): void {
  router.get('/robots.txt', (ctx) => {
    ctx.type = 'text/plain';
    ctx.body = 'User-agent: *\nDisallow: /\n';
  });
  router.get('/favicon.ico', (ctx) => {
    ctx.type = 'image/png';
    ctx.set('Cache-Control', 'public, max-age=86400');
    ctx.body = FAVICON;
  });
  router.get('/version', (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    ctx.body = versionInfo(o.build);
  });
  const page = (render: (url: string) => string) => (ctx: Context) => {
    ctx.type = 'text/html; charset=utf-8';
    ctx.set(STATIC_PAGE_HEADERS);
    ctx.body = render(o.serverUrl);
  };
  router.get('/apple', page(applePage));
  router.get('/windows', page(windowsPage));
  router.get('/apple/:platform', (ctx) => {
    const platform = String(ctx.params.platform);
    ctx.set('X-Content-Type-Options', 'nosniff');
    if (!isApplePlatform(platform)) {
      ctx.status = 400;
      ctx.type = 'text/plain; charset=utf-8';
      ctx.body = `unknown platform ${JSON.stringify(platform)}: platform must be ${Object.keys(APPLE_PLATFORMS).join(', ')}\n`;
      return;
    }
    ctx.type = 'application/x-apple-aspen-config; charset=utf-8';
    ctx.set('Content-Disposition', `attachment; filename="headway-${platform}.mobileconfig"`);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = appleProfile(platform, o.serverUrl);
  });
}
