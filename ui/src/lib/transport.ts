// One interface between the UI and Catena. The browser build talks HTTP + SSE to `catena serve`
// (http.ts); the desktop app will implement the same interface over Tauri commands and events.

import type { AgentEvent, Health, ModelRow, Profile, Rating, RunOptions, RunRecord, SessionSummary, StartedRun } from './types';

/** A stream subscription; call to stop listening. */
export type Unsubscribe = () => void;

export interface EventHandlers {
  /** Every event, in order, with its sequence number. */
  onEvent: (event: AgentEvent, seq: number | null) => void;
  /** The stream ended (the run finished, failed or was cancelled, or the connection dropped). */
  onEnd: (error?: string) => void;
}

export interface Transport {
  health(): Promise<Health>;
  profiles(): Promise<Profile[]>;
  models(): Promise<ModelRow[]>;
  startRun(options: RunOptions): Promise<StartedRun>;
  /** Streams a run's events: stored ones first, then live ones until it ends. */
  runEvents(runId: string, handlers: EventHandlers, after?: number): Unsubscribe;
  cancelRun(runId: string): Promise<void>;
  rateRun(runId: string, rating: Rating): Promise<void>;
  sessions(search?: string): Promise<SessionSummary[]>;
  session(id: string): Promise<{ id: string; runs: RunRecord[] }>;
  deleteSession(id: string): Promise<void>;
  /** Training data from rated runs, as a file the user can save. */
  exportData(format: 'sft' | 'alpaca', feedback: 'good' | 'any'): Promise<Blob>;
}

/** What the server answered when it refused (OpenAI's error shape). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
