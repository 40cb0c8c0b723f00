// Folds a run's event stream into the chain as the UI shows it: one item per block (plan, think,
// code, reflection, verification, answer, ...), each tool call with its observation, each question
// about an external tool's call with its answer, and the end.

import type { DecidedBy, RunEvent, Source } from './types';

/** A question the run asked the user: may this external (MCP) tool's call run? */
export interface Approval {
  kind: 'approval';
  /** The question's number within the run, for the answer. */
  ask: number;
  server: string;
  tool: string;
  /** The call's arguments, as JSON text. */
  arguments: string;
  /** Set once it was answered (or declined for the user). */
  decision?: { allowed: boolean; decidedBy: DecidedBy };
}

export type Item =
  | { kind: 'block'; tag: string; text: string; closed: boolean; open: boolean; source: Source }
  | { kind: 'text'; text: string }
  | { kind: 'observation'; index: number; tool: string; text: string; success: boolean; duplicate: boolean; elapsedMs: number }
  | { kind: 'issue'; message: string }
  | { kind: 'note'; message: string }
  | Approval;

export interface Chain {
  items: Item[];
  started?: Extract<RunEvent, { type: 'run_started' }>;
  summary?: Extract<RunEvent, { type: 'summary' }>;
  error?: string;
  /** Why the run is not all in the session store, when it is not (heard live only). */
  notSaved?: string;
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
        // A block a budget cut short, closed by the runtime so the model could still answer.
        if (event.source === 'runtime') last.source = 'runtime';
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
    case 'answer_asked':
      chain.items.push({
        kind: 'note',
        message: `Cut short (${event.reason.replace(/_/g, ' ')}): Catena closed the block and asked the model for its answer.`,
      });
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
    case 'approval_requested':
      chain.items.push({ kind: 'approval', ask: event.ask, server: event.server, tool: event.tool, arguments: event.arguments });
      break;
    case 'approval_answered': {
      const asked = chain.items.find((item): item is Approval => item.kind === 'approval' && item.ask === event.ask);
      if (asked) asked.decision = { allowed: event.allowed, decidedBy: event.decided_by };
      break;
    }
    case 'summary':
      chain.summary = event;
      break;
    case 'error':
      chain.error = event.message;
      break;
    case 'not_saved':
      chain.notSaved = event.message;
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

/** A call's arguments for reading: indented JSON, or the text as it came. */
export function prettyArguments(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** What became of a question, in words. */
export function decisionText(decision: NonNullable<Approval['decision']>): string {
  switch (decision.decidedBy) {
    case 'user':
      return decision.allowed ? 'Allowed: the call ran.' : 'Denied: the call did not run.';
    case 'timeout':
      return 'Declined: no one answered in time, so the call did not run.';
    case 'cancelled':
      return 'Declined: the run was stopped, so the call did not run.';
  }
}
