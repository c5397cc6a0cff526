// A Headway server for the cluster tests, in a process of its own: configured by
// HEADWAY_CHILD_CONFIG (JSON, as startTestServer takes it), it prints {"url": ...}
// once listening and stops cleanly on SIGTERM.
import { startTestServer } from './server.js';

const server = await startTestServer(JSON.parse(process.env.HEADWAY_CHILD_CONFIG ?? '{}') as Record<string, unknown>);
process.stdout.write(JSON.stringify({ url: server.urls.http }) + '\n');
process.on('SIGTERM', () => { void server.stop().finally(() => process.exit(0)); });
