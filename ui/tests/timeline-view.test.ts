import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import Timeline from '../src/components/Timeline.svelte';
import { apply, emptyChain } from '../src/lib/timeline';
import { isWebLink, parseCrawl, parseWebResults } from '../src/lib/observations';

describe('Timeline', () => {
  it('shows code highlighted, the observation, folded thoughts and the answer', () => {
    let chain = emptyChain();
    chain = apply(chain, { type: 'block_ended', tag: 'think', content: 'secret musing', closed: true, source: 'model' }, 1);
    chain = apply(chain, { type: 'block_ended', tag: 'code', content: '```py\nprint(2**10)\n```', closed: true, source: 'model' }, 2);
    chain = apply(chain, { type: 'observation', index: 1, tool: 'code', text: '1024', success: true, duplicate: false, elapsed_ms: 12 }, 3);
    chain = apply(chain, { type: 'summary', answer: '1024', stop_reason: 'answer', tool_calls: 1, prompt_tokens: 90, context_tokens: 99, evaluated_tokens: 99, generated_tokens: 9, parse_issues: 0, timings: { total_ms: 1000, prefill_ms: 100, decode_ms: 800, tools_ms: 100, prefill_tokens_per_s: 500, decode_tokens_per_s: 20 }, trajectory: '' }, 4);
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

  it('says, after the answer, that a run was not saved completely', () => {
    let chain = emptyChain();
    chain = apply(chain, { type: 'block_ended', tag: 'answer', content: '4', closed: true, source: 'model' }, 1);
    chain = apply(chain, { type: 'summary', answer: '4', stop_reason: 'answer', tool_calls: 0, prompt_tokens: 90, context_tokens: 99, evaluated_tokens: 99, generated_tokens: 9, parse_issues: 0, timings: { total_ms: 1000, prefill_ms: 100, decode_ms: 800, tools_ms: 0, prefill_tokens_per_s: 500, decode_tokens_per_s: 20 }, trajectory: '' }, 2);
    const saved = render(Timeline, { chain });
    expect(screen.queryByTestId('not-saved')).toBeNull();
    saved.unmount();
    chain = apply(chain, { type: 'not_saved', message: 'This run was not saved completely (database or disk is full).' }, 3);
    render(Timeline, { chain });
    const alert = screen.getByTestId('not-saved');
    expect(alert.getAttribute('role')).toBe('alert');
    expect(alert.textContent).toContain('disk is full');
    expect(screen.getByTestId('answer').compareDocumentPosition(alert) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
  });
});

describe('web tools in the timeline', () => {
  const results =
    'Found 2 results:\n\n## Web Results\n' +
    '1. [Tide tables](https://tides.example/north)\nDate published: 2024-03-09\nhttps://tides.example/north\nHigh water 06:52\n\n' +
    '2. [Notes](file:///home/u/notes.md)\nSource: local\nfile:///home/u/notes.md\nThe harbour\n\n';
  const pages =
    'Page 1 [https://tides.example/north] Summary:\n1. High water: 06:52.\n\n3. Links: none\n\n' +
    'Page 2 [javascript:alert(1)]: [Page content not accessible: only http and https pages can be read]';

  it('reads the protocol texts back, and nothing else', () => {
    const hits = parseWebResults(results);
    expect(hits).toEqual([
      { title: 'Tide tables', url: 'https://tides.example/north', date: '2024-03-09', snippet: 'High water 06:52' },
      { title: 'Notes', url: 'file:///home/u/notes.md', source: 'local', snippet: 'The harbour' },
    ]);
    expect(parseWebResults("No results found for query: 'x'. Use a less specific query.")).toBeNull();
    expect(parseWebResults('Found 1 results:\n\n## Web Results\n1. broken\n\n')).toBeNull();
    expect(parseCrawl(pages)).toEqual([
      { url: 'https://tides.example/north', summary: '1. High water: 06:52.\n\n3. Links: none' },
      { url: 'javascript:alert(1)', error: 'only http and https pages can be read' },
    ]);
    expect(parseCrawl('[EXECUTED] Code exited with status 0.')).toBeNull();
    expect(isWebLink('https://x.org')).toBe(true);
    expect(isWebLink('javascript:alert(1)')).toBe(false);
    expect(isWebLink('file:///etc/passwd')).toBe(false);
  });

  it('shows hits as links and each page with its address; only web addresses read are links', () => {
    let chain = emptyChain();
    chain = apply(chain, { type: 'observation', index: 1, tool: 'web_search', text: results, success: true, duplicate: false, elapsed_ms: 3 }, 1);
    chain = apply(chain, { type: 'observation', index: 2, tool: 'crawl_page', text: pages, success: true, duplicate: false, elapsed_ms: 9000 }, 2);
    const { container } = render(Timeline, { chain });
    const links = [...container.querySelectorAll('a')].map((a) => [a.textContent, a.getAttribute('href'), a.getAttribute('rel')]);
    expect(links).toEqual([
      ['Tide tables', 'https://tides.example/north', 'noopener noreferrer'],
      ['https://tides.example/north', 'https://tides.example/north', 'noopener noreferrer'],
    ]);
    expect(screen.getByTestId('web-hits').textContent).toContain('file:///home/u/notes.md');
    const read = screen.getByTestId('pages-read');
    expect(read.textContent).toContain('1. High water: 06:52.');
    expect(read.textContent).toContain('Not read: only http and https pages can be read');
    expect(read.textContent).toContain('javascript:alert(1)');
  });
});
