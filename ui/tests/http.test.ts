import { describe, expect, it } from 'vitest';
import { HttpTransport } from '../src/lib/http';
import { ApiError } from '../src/lib/transport';
import type { RunEvent } from '../src/lib/types';

/** A fetch that answers from a table and records what it was asked. */
function fakeFetch(routes: Record<string, () => Response>) {
  const calls: { url: string; init?: RequestInit }[] = [];
  const fetcher = async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    calls.push({ url, init });
    const route = Object.keys(routes).find((r) => url.startsWith(r));
    if (!route) return new Response('{"error":{"message":"No route"}}', { status: 404 });
    return routes[route]();
  };
  return { fetcher: fetcher as typeof fetch, calls };
}

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

describe('HttpTransport', () => {
  it('posts a run with its options', async () => {
    const { fetcher, calls } = fakeFetch({
      '/v1/agent/runs': () => Response.json({ id: 'r1', session_id: 's1', status: 'queued' }),
    });
    const started = await new HttpTransport('', fetcher).startRun({ task: 'hi', profile: 'code', temperature: 0 });
    expect(started.id).toBe('r1');
    expect(calls[0].init?.method).toBe('POST');
    expect(JSON.parse(String(calls[0].init?.body))).toEqual({ task: 'hi', profile: 'code', temperature: 0 });
  });

  it('posts the runs to vote over', async () => {
    const { fetcher, calls } = fakeFetch({
      '/v1/agent/votes': () => Response.json({ chains: [], groups: [], abstained: ['a', 'b'], answer: null }),
    });
    const vote = await new HttpTransport('', fetcher).vote(['a', 'b']);
    expect(vote.abstained).toEqual(['a', 'b']);
    expect(calls[0].init?.method).toBe('POST');
    expect(JSON.parse(String(calls[0].init?.body))).toEqual({ runs: ['a', 'b'] });
  });

  it('puts a change of the web settings and reads the tools back', async () => {
    const { fetcher, calls } = fakeFetch({
      '/v1/settings/web': () => Response.json({ search: 'serper', keys: { serper: { in_settings: true, in_environment: false } } }),
      '/v1/tools': () => Response.json({ data: [{ tool: 'web_search', ready: true, detail: 'Serper, online' }] }),
    });
    const transport = new HttpTransport('', fetcher);
    const saved = await transport.saveWebSettings({ search: 'serper', keys: { serper: 'sk-1' } });
    expect(saved.keys.serper.in_settings).toBe(true);
    expect(calls[0].init?.method).toBe('PUT');
    expect(JSON.parse(String(calls[0].init?.body))).toEqual({ search: 'serper', keys: { serper: 'sk-1' } });
    expect((await transport.tools())[0].ready).toBe(true);
  });

  it("turns the server's error into an ApiError with its message", async () => {
    const { fetcher } = fakeFetch({
      '/v1/agent/runs': () => Response.json({ error: { message: 'The queue is full (8 waiting).' } }, { status: 429 }),
    });
    const err = await new HttpTransport('', fetcher).startRun({ task: 'x', profile: 'code' }).catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(429);
    expect(err.message).toBe('The queue is full (8 waiting).');
  });

  it('streams events in order and ends when the stream does', async () => {
    const body = streamOf([
      'id: 1\nevent: run_started\ndata: {"type":"run_started","profile":"code"',
      ',"model":"m","prompt_tokens":1,"cached_tokens":0,"context_size":8,"seed":1,"temperature":0}\n\nid: 2\n',
      'data: {"type":"summary","answer":"ok","stop_reason":"answer","tool_calls":0,"generated_tokens":1,"context_tokens":2}\n\n',
    ]);
    const { fetcher, calls } = fakeFetch({ '/v1/agent/runs/r1/events': () => new Response(body) });
    const events: [RunEvent, number | null][] = [];
    const ended = await new Promise<string | undefined>((resolve) => {
      new HttpTransport('', fetcher).runEvents('r1', { onEvent: (e, seq) => events.push([e, seq]), onEnd: resolve }, 0);
    });
    expect(ended).toBeUndefined();
    expect(events.map(([e, seq]) => [e.type, seq])).toEqual([
      ['run_started', 1],
      ['summary', 2],
    ]);
    expect(calls[0].url).toBe('/v1/agent/runs/r1/events?after=0');
  });

  it('reports a stream that cannot start', async () => {
    const { fetcher } = fakeFetch({});
    const ended = await new Promise<string | undefined>((resolve) => {
      new HttpTransport('', fetcher).runEvents('nope', { onEvent: () => {}, onEnd: resolve });
    });
    expect(ended).toBe('No route');
  });
});
