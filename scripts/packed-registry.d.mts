// Types of packed-registry.mjs for the TypeScript that imports it (packages/integration/test/packed-install.test.ts).
import type { Server } from 'node:http';

export interface Workspace { dir: string; pkg: Record<string, any> }
export interface LocalRegistry { server: Server; url: string; served: Set<string> }

export function publishedWorkspaces(root?: string): Workspace[];
export function packWorkspaces(dir: string, published: Workspace[], root?: string): Promise<string[]>;
export function serveRegistry(dir: string, published: Workspace[]): Promise<LocalRegistry>;
