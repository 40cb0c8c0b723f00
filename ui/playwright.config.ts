import { defineConfig } from '@playwright/test';

// End-to-end tests in Debian's Chromium against a real `catena serve` (started by global-setup.ts
// with the default model). Playwright never downloads a browser here.
export default defineConfig({
  testDir: 'e2e',
  globalSetup: './e2e/global-setup.ts',
  timeout: 180_000,
  // Each `expect` waits this long for the page (5 s by default): a deadline for a screen that never
  // comes, not a speed check, which a 2-core machine busy with a build would fail.
  expect: { timeout: 30_000 },
  workers: 1,
  reporter: [['list']],
  use: {
    browserName: 'chromium',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    },
    viewport: { width: 1280, height: 900 },
  },
});
