// What the user did and Catena could not do is said where it was done, and nothing shows as done
// that was not: a rating the store refused is not left pressed.

import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { setTransport, ui } from '../src/lib/app.svelte';
import type { Transport } from '../src/lib/transport';
import type { RunEvent, RunRecord } from '../src/lib/types';
import RunView from '../src/views/RunView.svelte';
import SessionsView from '../src/views/SessionsView.svelte';

const FULL = 'the session store: database or disk is full';

const summary: RunEvent = {
  type: 'summary', answer: '4', stop_reason: 'answer', tool_calls: 0, prompt_tokens: 90, context_tokens: 99, evaluated_tokens: 99,
  generated_tokens: 9, parse_issues: 0, trajectory: '',
  timings: { total_ms: 1000, prefill_ms: 100, decode_ms: 800, tools_ms: 0, prefill_tokens_per_s: 500, decode_tokens_per_s: 20 },
};

describe('an action Catena could not carry out', () => {
  it('a run rated while the store is full: the button is put back and the page says why', async () => {
    setTransport({
      health: async () => ({ status: 'ok', model: 'm', architecture: 'qwen2', adapter: null, context_size: 4096 }),
      models: async () => [],
      profiles: async () => [],
      runEvents: (_id: string, handlers: { onEvent: (e: RunEvent, seq: number) => void; onEnd: () => void }) => {
        queueMicrotask(() => {
          handlers.onEvent(summary, 1);
          handlers.onEnd();
        });
        return () => undefined;
      },
      rateRun: async () => {
        throw new Error(FULL);
      },
    } as unknown as Transport);
    ui.runId = 'r1';
    render(RunView);
    const good = await screen.findByRole('button', { name: '✓ Good' });
    await fireEvent.click(good);
    expect((await screen.findByText(/The rating was not saved/)).textContent).toContain(FULL);
    expect(good.getAttribute('aria-pressed')).toBe('false');
    ui.runId = null;
  });

  it('a stored run rated while the store is full: the same, in the sessions view', async () => {
    const run = { id: 'r1', task: 'What is 2+2?', status: 'finished', kind: 'agent', profile: 'math', model: 'm', started_ms: 0, answer: '4', feedback: null };
    setTransport({
      sessions: async () => [{ id: 's1', title: 'What is 2+2?', runs: 1, updated_ms: 0 }],
      session: async () => ({ id: 's1', runs: [run as unknown as RunRecord] }),
      rateRun: async () => {
        throw new Error(FULL);
      },
    } as unknown as Transport);
    render(SessionsView);
    await fireEvent.click(await screen.findByRole('button', { name: 'What is 2+2?' }));
    const good = await screen.findByRole('button', { name: '✓ Good' });
    await fireEvent.click(good);
    expect((await screen.findByRole('alert')).textContent).toBe(`The rating was not saved: ${FULL}`);
    expect(good.getAttribute('aria-pressed')).toBe('false');
  });
});
