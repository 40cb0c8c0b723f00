// Folds a run's event stream into the chain as the UI shows it: one item per block (plan, think,
// code, reflection, verification, answer, ...), each tool call with its observation, and the end.

import type { RunEvent, Source } from './types';

export type Item =
  | { kind: 'block'; tag: string; text: string; closed: boolean; open: boolean; source: Source }
  | { kind: 'text'; text: string }
  | { kind: 'observation'; index: number; tool: string; text: string; success: boolean; duplicate: boolean; elapsedMs: number }
  | { kind: 'issue'; message: string };

export interface Chain {
  items: Item[];
  started?: Extract<RunEvent, { type: 'run_started' }>;
  summary?: Extract<RunEvent, { type: 'summary' }>;
  error?: string;
  /** The id of the last event applied, for resuming the stream. */
  lastSeq: number;
}

export function emptyChain(): Chain {
  return { items: [], lastSeq: 0 };
}

/** Applies one event (events with a sequence number at or below `lastSeq` were seen already). */
export function apply(chain: Chain, event: RunEvent, seq: number | null): Chain {
  if (seq !== null) {
    if (seq <= chain.lastSeq) return chain;
    chain.lastSeq = seq;
  }
  const last = chain.items.at(-1);
  switch (event.type) {
    case 'run_started':
      chain.started = event;
      break;
    case 'block_started':
      chain.items.push({ kind: 'block', tag: event.tag, text: '', closed: false, open: true, source: event.source });
      break;
    case 'block_delta':
      if (last?.kind === 'block' && last.tag === event.tag && last.open) last.text += event.text;
      else chain.items.push({ kind: 'block', tag: event.tag, text: event.text, closed: false, open: true, source: event.source });
      break;
    case 'block_ended':
      if (last?.kind === 'block' && last.tag === event.tag && last.open) {
        last.text = event.content;
        last.closed = event.closed;
        last.open = false;
      } else {
        chain.items.push({ kind: 'block', tag: event.tag, text: event.content, closed: event.closed, open: false, source: event.source });
      }
      break;
    case 'text':
      if (event.text.trim() === '') break;
      if (last?.kind === 'text') last.text += event.text;
      else chain.items.push({ kind: 'text', text: event.text });
      break;
    case 'parse_issue':
      chain.items.push({ kind: 'issue', message: event.message });
      break;
    case 'tool_call':
      break;
    case 'observation':
      chain.items.push({
        kind: 'observation',
        index: event.index,
        tool: event.tool,
        text: event.text,
        success: event.success,
        duplicate: event.duplicate,
        elapsedMs: event.elapsed_ms,
      });
      break;
    case 'summary':
      chain.summary = event;
      break;
    case 'error':
      chain.error = event.message;
      break;
  }
  return chain;
}

/** Blocks shown folded by default: the model's private reasoning. */
export function foldedByDefault(tag: string): boolean {
  return tag === 'think';
}

/** Splits a `<code>` block into its program: the fenced part when there is one. */
export function programOf(block: string): string {
  const fence = /```[a-zA-Z0-9_+-]*\n([\s\S]*?)```/.exec(block);
  return (fence ? fence[1] : block).replace(/^\n+|\s+$/g, '');
}
