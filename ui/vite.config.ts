import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { svelteTesting } from '@testing-library/svelte/vite';

// `npm run dev` proxies the API to a `catena serve` on the default port.
export default defineConfig({
  // svelteTesting: the browser build of Svelte and cleanup between tests, under Vitest only.
  plugins: [svelte(), svelteTesting()],
  server: {
    proxy: {
      '/v1': 'http://127.0.0.1:8420',
      '/health': 'http://127.0.0.1:8420',
    },
  },
  build: { outDir: 'dist', emptyOutDir: true, chunkSizeWarningLimit: 600 },
  test: {
    environment: 'jsdom',
    include: ['tests/**/*.test.ts'],
    setupFiles: ['tests/setup.ts'],
    // A deadline for a test that hangs, not a speed check: Vitest's default of 5 s failed a
    // component test (7.96 s) on a 2-core machine busy with two builds.
    testTimeout: 60_000,
  },
});
