/**
 * The portal's build: `npm run build:portal` writes src/portal/dist/, which `tps serve` serves under
 * /portal (assets under /portal/assets/ with hashed names). `npx vite --config src/portal/vite.config.ts`
 * runs a dev server that forwards the API to a `tps serve` on TPS_PORTAL_DEV_API (default :8080).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = path.dirname(fileURLToPath(import.meta.url));
const api = process.env.TPS_PORTAL_DEV_API ?? 'http://127.0.0.1:8080';

export default defineConfig({
  root,
  base: '/portal/',
  publicDir: false,
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: path.join(root, 'dist'),
    emptyOutDir: true,
    target: 'es2022',
    // No inline scripts or data: URLs for code: the page's Content-Security-Policy allows 'self' only.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    chunkSizeWarningLimit: 400,
  },
  server: { proxy: { '/api': api, '/portal/api': api, '/oauth': api } },
});
