import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import type { Channel } from '@tauri-apps/api/core';
import { afterEach, describe, expect, it } from 'vitest';
import { TauriTransport, type FollowMessage } from '../src/lib/tauri';
import { ApiError } from '../src/lib/transport';
import type { RunEvent } from '../src/lib/types';

afterEach(() => clearMocks());

/** Lets pending promise callbacks run. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('TauriTransport', () => {
  it('invokes the command with its arguments in camelCase', async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'start_run') return { id: 'r1', session_id: 's1', status: 'queued' };
    });
    const started = await new TauriTransport().startRun({ task: 'hi', profile: 'code' });
    expect(started).toEqual({ id: 'r1', session_id: 's1', status: 'queued' });
    expect(calls).toEqual([['start_run', { options: { task: 'hi', profile: 'code' } }]]);
    await new TauriTransport().rateRun('r1', 'good');
    expect(calls[1]).toEqual(['rate_run', { runId: 'r1', rating: 'good' }]);
    await new TauriTransport().vote(['r1', 'r2']);
    expect(calls[2]).toEqual(['vote', { request: { runs: ['r1', 'r2'] } }]);
  });

  it('imports a folder through the app, which the HTTP transport cannot', async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return { id: 'mine', state: 'running', stage: null, done_bytes: 0, total_bytes: null, message: null, path: null };
    });
    const request = { dir: '/ckpt/mine', name: 'mine', quant: 'Q8_0', profile: 'code' } as const;
    const status = await new TauriTransport().importFolder(request);
    expect(status.state).toBe('running');
    expect(calls).toEqual([['import_folder', { request }]]);
    const { HttpTransport } = await import('../src/lib/http');
    expect('importFolder' in HttpTransport.prototype).toBe(false);
  });

  it("turns the app's {status, message} error into an ApiError", async () => {
    mockIPC(() => {
      throw { status: 409, message: 'Run `r1` is not running (it is finished).' };
    });
    const err = await new TauriTransport().cancelRun('r1').catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(409);
    expect(err.message).toBe('Run `r1` is not running (it is finished).');
  });

  it('delivers a followed run’s events in order and ends once', async () => {
    let channel: Channel<FollowMessage> | undefined;
    mockIPC((cmd, args) => {
      if (cmd === 'follow_run') {
        const a = args as { runId: string; after: number; onEvent: Channel<FollowMessage> };
        expect(a.runId).toBe('r1');
        expect(a.after).toBe(3);
        channel = a.onEvent;
        return 7;
      }
    });
    const seen: [RunEvent, number | null][] = [];
    const ends: (string | undefined)[] = [];
    new TauriTransport().runEvents('r1', { onEvent: (e, seq) => seen.push([e, seq]), onEnd: (e) => ends.push(e) }, 3);
    await settle();
    const text = { type: 'text', text: 'hello' } as unknown as RunEvent;
    channel!.onmessage({ seq: 4, event: text });
    channel!.onmessage({ seq: 5, event: text });
    channel!.onmessage({ end: true });
    channel!.onmessage({ seq: 6, event: text });
    expect(seen.map(([, seq]) => seq)).toEqual([4, 5]);
    expect(ends).toEqual([undefined]);
  });

  it('stops following when unsubscribed, even before the app answered', async () => {
    const calls: [string, unknown][] = [];
    let answer: (id: number) => void = () => {};
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'follow_run') return new Promise<number>((resolve) => (answer = resolve));
    });
    const ends: (string | undefined)[] = [];
    const stop = new TauriTransport().runEvents('r1', { onEvent: () => {}, onEnd: (e) => ends.push(e) });
    stop();
    answer(11);
    await settle();
    expect(calls.map(([cmd]) => cmd)).toEqual(['follow_run', 'unfollow_run']);
    expect(calls[1][1]).toEqual({ followId: 11 });
    expect(ends).toEqual([undefined]);
  });

  it('reports a run that cannot be followed', async () => {
    mockIPC(() => {
      throw { status: 404, message: 'No run `nope`.' };
    });
    const ends: (string | undefined)[] = [];
    new TauriTransport().runEvents('nope', { onEvent: () => {}, onEnd: (e) => ends.push(e) });
    await settle();
    expect(ends).toEqual(['No run `nope`.']);
  });

  it('says where the app saved an export', async () => {
    mockIPC((cmd, args) => (cmd === 'export_data' ? `/home/u/Downloads/catena-${(args as { format: string }).format}.jsonl` : null));
    expect(await new TauriTransport().exportData('sft', 'good')).toEqual({ savedTo: '/home/u/Downloads/catena-sft.jsonl' });
  });
});
