import { fireEvent, render, screen } from '@testing-library/svelte';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { afterEach, describe, expect, it } from 'vitest';
import Timeline from '../src/components/Timeline.svelte';
import { HttpTransport } from '../src/lib/http';
import { TauriTransport } from '../src/lib/tauri';
import { apply, decisionText, emptyChain, prettyArguments, type Approval } from '../src/lib/timeline';
import type { RunEvent } from '../src/lib/types';

afterEach(() => clearMocks());

const asked: RunEvent = {
  type: 'approval_requested',
  ask: 1,
  server: 'filesystem',
  tool: 'write_file',
  arguments: '{"path":"/home/me/notes/todo.txt","content":"buy milk"}',
};
const call: RunEvent = { type: 'tool_call', index: 1, tool: 'tool_call', input: '{"name":"write_file"}' };

function chainOf(events: RunEvent[]) {
  let chain = emptyChain();
  events.forEach((event, i) => (chain = apply(chain, event, i + 1)));
  return chain;
}

const approvals = (events: RunEvent[]) => chainOf(events).items.filter((item): item is Approval => item.kind === 'approval');

describe('questions in the chain', () => {
  it('shows a question, then what was decided, in its place', () => {
    const pending = approvals([call, asked]);
    expect(pending).toEqual([{ kind: 'approval', ask: 1, server: 'filesystem', tool: 'write_file', arguments: asked.type === 'approval_requested' ? asked.arguments : '' }]);
    const answered = approvals([call, asked, { type: 'approval_answered', ask: 1, allowed: true, decided_by: 'user' }]);
    expect(answered[0].decision).toEqual({ allowed: true, decidedBy: 'user' });
  });

  it('matches each answer to its own question, and ignores an answer to none', () => {
    const second: RunEvent = { ...asked, ask: 2, tool: 'move_file' } as RunEvent;
    const items = approvals([
      asked,
      second,
      { type: 'approval_answered', ask: 2, allowed: false, decided_by: 'cancelled' },
      { type: 'approval_answered', ask: 9, allowed: true, decided_by: 'user' },
    ]);
    expect(items.map((q) => [q.tool, q.decision?.decidedBy])).toEqual([
      ['write_file', undefined],
      ['move_file', 'cancelled'],
    ]);
  });

  it('says in words what became of a call', () => {
    expect(decisionText({ allowed: true, decidedBy: 'user' })).toMatch(/^Allowed/);
    expect(decisionText({ allowed: false, decidedBy: 'user' })).toMatch(/^Denied/);
    expect(decisionText({ allowed: false, decidedBy: 'timeout' })).toContain('in time');
    expect(decisionText({ allowed: false, decidedBy: 'cancelled' })).toContain('stopped');
    expect(prettyArguments('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(prettyArguments('not json')).toBe('not json');
  });
});

describe('the approval card', () => {
  it('shows the server, the tool and its arguments, and sends the answer from a button', async () => {
    const answers: [number, boolean][] = [];
    const onAnswer = async (ask: number, allow: boolean) => {
      answers.push([ask, allow]);
    };
    render(Timeline, { chain: chainOf([call, asked]), running: true, onAnswer });
    const card = screen.getByRole('region', { name: 'Approval for write_file' });
    expect(card.textContent).toContain('filesystem');
    expect(card.textContent).toContain('write_file');
    expect(screen.getByTestId('approval-arguments').textContent).toContain('"path": "/home/me/notes/todo.txt"');
    const allow = screen.getByRole('button', { name: 'Allow write_file' });
    const deny = screen.getByRole('button', { name: 'Deny write_file' });
    // Real buttons: reachable with Tab, pressed with Enter or Space.
    expect(allow.tagName).toBe('BUTTON');
    expect(deny.tagName).toBe('BUTTON');
    await fireEvent.click(deny);
    expect(answers).toEqual([[1, false]]);
  });

  it('shows the decision instead of the buttons once answered', () => {
    const chain = chainOf([call, asked, { type: 'approval_answered', ask: 1, allowed: false, decided_by: 'timeout' }]);
    render(Timeline, { chain, running: true, onAnswer: async () => {} });
    expect(screen.queryByRole('button', { name: /Allow/ })).toBeNull();
    expect(screen.getByRole('status').textContent).toContain('no one answered in time');
  });

  it('offers no buttons for a run that has ended or cannot be answered from here', () => {
    render(Timeline, { chain: chainOf([asked]), running: false, onAnswer: async () => {} });
    expect(screen.queryByRole('button', { name: /Allow/ })).toBeNull();
    expect(screen.getByTestId('approval').textContent).toContain('Not answered');
  });

  it('says when an answer was not taken, and lets the user try again', async () => {
    const onAnswer = async () => {
      throw new Error('Run `r1` has no question 1 waiting for an answer.');
    };
    render(Timeline, { chain: chainOf([asked]), running: true, onAnswer });
    await fireEvent.click(screen.getByRole('button', { name: 'Allow write_file' }));
    expect((await screen.findByRole('alert')).textContent).toContain('no question 1 waiting');
    expect((screen.getByRole('button', { name: 'Allow write_file' }) as HTMLButtonElement).disabled).toBe(false);
  });
});

describe('answering through the transports', () => {
  it('posts the answer over HTTP', async () => {
    const calls: { url: string; init?: RequestInit }[] = [];
    const fetcher = (async (input: RequestInfo | URL, init?: RequestInit) => {
      calls.push({ url: String(input), init });
      return Response.json({ id: 'r 1', ask: 3, allow: true });
    }) as typeof fetch;
    await new HttpTransport('', fetcher).answerApproval('r 1', 3, true);
    expect(calls[0].url).toBe('/v1/agent/runs/r%201/approvals/3');
    expect(calls[0].init?.method).toBe('POST');
    expect(JSON.parse(String(calls[0].init?.body))).toEqual({ allow: true });
  });

  it('invokes the desktop app’s command', async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
    });
    await new TauriTransport().answerApproval('r1', 2, false);
    expect(calls).toEqual([['answer_approval', { runId: 'r1', ask: 2, allow: false }]]);
  });
});
