import { describe, expect, it } from 'vitest';
import { apply, emptyChain, programOf } from '../src/lib/timeline';
import type { RunEvent } from '../src/lib/types';

const run: RunEvent[] = [
  { type: 'run_started', profile: 'math', model: 'm', prompt_tokens: 10, cached_tokens: 0, context_size: 4096, seed: 1, temperature: 0 },
  { type: 'block_started', tag: 'plan', source: 'prefill' },
  { type: 'block_delta', tag: 'plan', text: 'compute ', source: 'prefill' },
  { type: 'block_delta', tag: 'plan', text: 'it', source: 'prefill' },
  { type: 'block_ended', tag: 'plan', content: 'compute it', closed: true, source: 'prefill' },
  { type: 'text', text: '\n', source: 'prefill' },
  { type: 'block_started', tag: 'code', source: 'model' },
  { type: 'block_ended', tag: 'code', content: '\n```py\nprint(2**100)\n```\n', closed: true, source: 'model' },
  { type: 'tool_call', index: 1, tool: 'code', input: 'print(2**100)' },
  { type: 'observation', index: 1, tool: 'code', text: '[EXECUTED] ...', success: true, duplicate: false, elapsed_ms: 20 },
  { type: 'block_started', tag: 'answer', source: 'model' },
  { type: 'block_delta', tag: 'answer', text: '42', source: 'model' },
  { type: 'summary', answer: '42', stop_reason: 'answer', tool_calls: 1, prompt_tokens: 370, context_tokens: 400, evaluated_tokens: 400, generated_tokens: 30, parse_issues: 0, timings: { total_ms: 1000, prefill_ms: 100, decode_ms: 800, tools_ms: 100, prefill_tokens_per_s: 500, decode_tokens_per_s: 20 }, trajectory: '' },
];

describe('the chain', () => {
  it('folds events into blocks, observations and the end', () => {
    let chain = emptyChain();
    run.forEach((event, i) => (chain = apply(chain, event, i + 1)));
    expect(chain.items.map((item) => (item.kind === 'block' ? item.tag : item.kind))).toEqual(['plan', 'code', 'observation', 'answer']);
    const plan = chain.items[0];
    expect(plan).toMatchObject({ kind: 'block', text: 'compute it', open: false, closed: true, source: 'prefill' });
    expect(chain.items[3]).toMatchObject({ kind: 'block', text: '42', open: true });
    expect(chain.summary?.answer).toBe('42');
    expect(chain.started?.profile).toBe('math');
    expect(chain.lastSeq).toBe(run.length);
  });

  it('shows a chain cut short: the block Catena closed, a note, then the answer', () => {
    const cut: RunEvent[] = [
      { type: 'block_started', tag: 'think', source: 'model' },
      { type: 'block_delta', tag: 'think', text: 'again and again', source: 'model' },
      { type: 'block_ended', tag: 'think', content: 'again and again', closed: true, source: 'runtime' },
      { type: 'answer_asked', reason: 'repetition' },
      { type: 'block_started', tag: 'answer', source: 'model' },
      { type: 'block_ended', tag: 'answer', content: '\\boxed{1229}', closed: true, source: 'model' },
    ];
    let chain = emptyChain();
    cut.forEach((event, i) => (chain = apply(chain, event, i + 1)));
    expect(chain.items.map((item) => item.kind)).toEqual(['block', 'note', 'block']);
    expect(chain.items[0]).toMatchObject({ tag: 'think', closed: true, source: 'runtime' });
    expect(chain.items[1]).toMatchObject({ message: expect.stringContaining('Cut short (repetition)') });
  });

  it('ignores events it has already seen (a resumed stream)', () => {
    let chain = emptyChain();
    run.slice(0, 5).forEach((event, i) => (chain = apply(chain, event, i + 1)));
    run.forEach((event, i) => (chain = apply(chain, event, i + 1)));
    expect(chain.items.filter((item) => item.kind === 'block' && item.tag === 'plan')).toHaveLength(1);
  });

  it('keeps the error of a failed run', () => {
    const chain = apply(emptyChain(), { type: 'error', message: 'the model worker stopped' }, 1);
    expect(chain.error).toBe('the model worker stopped');
  });

  it('finds the program inside a fenced code block', () => {
    expect(programOf('\n```py\nprint(1)\n```\n')).toBe('print(1)');
    expect(programOf('\nprint(2)\n')).toBe('print(2)');
  });
});
