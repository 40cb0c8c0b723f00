import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import SampleChains from '../src/components/SampleChains.svelte';
import { setTransport } from '../src/lib/app.svelte';
import type { Transport } from '../src/lib/transport';
import type { Vote } from '../src/lib/types';

describe('SampleChains', () => {
  it('says which group a program printed, and which chain counted for its output', async () => {
    // Chain 1 answered a guess its program contradicted; chain 3 answered what it printed.
    const vote: Vote = {
      chains: [
        { run_id: 'r1', seed: 11, valid: true, answer: '\\boxed{7854}', mean_logprob: -0.1 },
        { run_id: 'r2', seed: 12, valid: true, answer: '\\boxed{7854}', mean_logprob: -0.2 },
        { run_id: 'r3', seed: 13, valid: true, answer: '\\boxed{1229}', mean_logprob: -0.5 },
      ],
      groups: [
        { answer: '\\boxed{1229}', runs: ['r1', 'r3'], best: 'r1', mean_logprob: -0.3, printed: true, from_output: ['r1'] },
        { answer: '\\boxed{7854}', runs: ['r2'], best: 'r2', mean_logprob: -0.2, printed: false, from_output: [] },
      ],
      abstained: [],
      answer: '\\boxed{1229}',
    };
    setTransport({
      // Every chain has already ended: the vote is counted at once.
      runEvents: (_id: string, handlers: { onEnd: (error?: string) => void }) => {
        queueMicrotask(() => handlers.onEnd());
        return () => undefined;
      },
      vote: async () => vote,
    } as unknown as Transport);
    render(SampleChains, { ids: ['r1', 'r2', 'r3'] });
    expect((await screen.findByTestId('vote-answer')).textContent).toBe('\\boxed{1229}');
    const printed = screen.getAllByTestId('vote-printed');
    expect(printed).toHaveLength(1);
    const winner = printed[0].closest('li');
    expect(winner?.textContent).toContain('chains 1, 3');
    const fromOutput = screen.getByTestId('vote-from-output');
    expect(fromOutput.closest('li')).toBe(winner);
    expect(fromOutput.textContent?.replace(/\s+/g, ' ').trim()).toBe(
      '· chain 1 answered \\boxed{7854}; its last program printed this',
    );
    const tally = screen.getByRole('list', { name: 'Tally' });
    expect(tally.querySelectorAll('li')[1].textContent).not.toContain('printed');
  });
});
