// Starts `catena serve` (this build's binary, the default model, a throw-away session store) on a
// free port, and stops it when the tests end.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

export default async function globalSetup() {
  const bin = process.env.CATENA_BIN ?? resolve(import.meta.dirname, '../../target/release/catena');
  const store = mkdtempSync(join(tmpdir(), 'catena-ui-e2e-'));
  const server = spawn(bin, ['serve', '--port', '0', '--store-dir', store, '--ctx-size', '4096', '--sessions', '1'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: server.stdout! });
  const base = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error('catena serve did not start within 120 s')), 120_000);
    server.once('exit', (code) => fail(new Error(`catena serve exited with ${code}`)));
    lines.on('line', (line) => {
      const match = / on (http:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        ok(match[1]);
      }
    });
  });
  process.env.CATENA_URL = base;
  return async () => {
    server.kill('SIGTERM');
    rmSync(store, { recursive: true, force: true });
  };
}
