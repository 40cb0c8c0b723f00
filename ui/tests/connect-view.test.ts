import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import ConnectView from '../src/views/ConnectView.svelte';
import { setTransport } from '../src/lib/app.svelte';
import { HttpTransport } from '../src/lib/http';
import { TauriTransport } from '../src/lib/tauri';
import type { Transport } from '../src/lib/transport';
import type { Health } from '../src/lib/types';

const health: Health = {
  status: 'ok',
  model: 'qwen2.5-coder-0.5b-instruct-q4_k_m',
  architecture: 'qwen2',
  adapter: null,
  context_size: 8192,
  version: '0.1.0',
  uptime_s: 1,
  in_flight: 0,
  queue_limit: 32,
  live_runs: 0,
  worker: { pid: 1, alive: true, restarts: 0 },
};

describe('the connect page in the desktop app', () => {
  it('has no server to connect to, says so, and shows how to start one', async () => {
    // The desktop's transport answers health but has no `connection`: it runs no HTTP server.
    expect('connection' in TauriTransport.prototype).toBe(false);
    expect('connection' in HttpTransport.prototype).toBe(true);
    setTransport({ health: async () => health } as unknown as Transport);
    render(ConnectView);
    expect((await screen.findByTestId('no-server')).textContent).toContain('no HTTP server');
    // The configurations still come, for `catena serve` at its default address, with the model.
    const codex = await screen.findByTestId('config-codex');
    expect(codex.textContent).toContain('base_url = "http://127.0.0.1:8420/v1"');
    expect(codex.textContent).toContain('model = "qwen2.5-coder-0.5b-instruct-q4_k_m"');
    // Nothing to test the connection against, and no key or context of a server to show.
    expect(screen.queryByRole('button', { name: 'Test the connection' })).toBeNull();
    expect(screen.queryByTestId('api-key')).toBeNull();
    expect(screen.getByRole('button', { name: 'Copy the command that starts catena serve' })).toBeTruthy();
  });
});
