import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import Timeline from '../src/components/Timeline.svelte';
import { apply, emptyChain } from '../src/lib/timeline';

describe('Timeline', () => {
  it('shows code highlighted, the observation, folded thoughts and the answer', () => {
    let chain = emptyChain();
    chain = apply(chain, { type: 'block_ended', tag: 'think', content: 'secret musing', closed: true, source: 'model' }, 1);
    chain = apply(chain, { type: 'block_ended', tag: 'code', content: '```py\nprint(2**10)\n```', closed: true, source: 'model' }, 2);
    chain = apply(chain, { type: 'observation', index: 1, tool: 'code', text: '1024', success: true, duplicate: false, elapsed_ms: 12 }, 3);
    chain = apply(chain, { type: 'summary', answer: '1024', stop_reason: 'answer', tool_calls: 1, generated_tokens: 9, context_tokens: 99 }, 4);
    const { container } = render(Timeline, { chain });
    expect(screen.getByTestId('observation').textContent).toBe('1024');
    expect(screen.getByTestId('answer').textContent).toBe('1024');
    // Thoughts are folded by default.
    const details = container.querySelector('details');
    expect(details?.open).toBe(false);
    expect(details?.textContent).toContain('secret musing');
    // The program is highlighted (keyword spans), not shown as raw fences.
    const code = container.querySelector('code.hljs');
    expect(code?.querySelector('.hljs-built_in, .hljs-keyword')).not.toBeNull();
    expect(code?.textContent).toBe('print(2**10)');
    expect(screen.getByRole('button', { name: 'Copy observation' })).toBeTruthy();
  });
});
