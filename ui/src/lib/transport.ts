// One interface between the UI and Catena. The browser build talks HTTP + SSE to `catena serve`
// (http.ts); the desktop app implements the same interface over Tauri commands and channels
// (tauri.ts).

import type { Connection, RunEvent, DownloadStatus, Health, ImportRequest, ModelRow, Profile, Rating, RunOptions, ServedModel, SessionInfo, SessionRuns, StartedRun, ToolStatus, TrainingData, TrainingRequest, TrainingStatus, Vote, WebSettings, WebSettingsUpdate } from './types';

/** A stream subscription; call to stop listening. */
export type Unsubscribe = () => void;

export interface EventHandlers {
  /** Every event, in order, with its sequence number. */
  onEvent: (event: RunEvent, seq: number | null) => void;
  /** The stream ended (the run finished, failed or was cancelled, or the connection dropped). */
  onEnd: (error?: string) => void;
}

/** An export: a file for the browser to download, or one the desktop app already saved. */
export type ExportResult = { blob: Blob; fileName: string } | { savedTo: string };

export interface Transport {
  health(): Promise<Health>;
  /**
   * Where editors reach the server, and its key. Only `catena serve` has it: the desktop app
   * runs no HTTP server, so editors cannot connect to it.
   */
  connection?(): Promise<Connection>;
  profiles(): Promise<Profile[]>;
  /** Each action tool and whether something answers it on this machine. */
  tools(): Promise<ToolStatus[]>;
  /** The `[web]` settings (search backend, index, reading pages, summariser), keys left out. */
  webSettings(): Promise<WebSettings>;
  saveWebSettings(update: WebSettingsUpdate): Promise<WebSettings>;
  models(): Promise<ModelRow[]>;
  /** Starts downloading a catalog model; `downloads()` shows its progress. */
  pullModel(id: string): Promise<DownloadStatus>;
  downloads(): Promise<DownloadStatus[]>;
  /**
   * Converts and installs a checkpoint folder; `downloads()` shows its stages. Only the desktop
   * app has it: the HTTP server never lets a request name a folder to read.
   */
  importFolder?(request: ImportRequest): Promise<DownloadStatus>;
  /** Serves another installed model from now on (resolves once it is loaded). */
  serveModel(id: string): Promise<ServedModel>;
  /** Starts a run, or with `samples: N` N runs of the task in one session. */
  startRun(options: RunOptions): Promise<StartedRun>;
  /** The vote over ended runs of one task: answers grouped by the profile's verifier. */
  vote(runs: string[]): Promise<Vote>;
  /** Streams a run's events: stored ones first, then live ones until it ends. */
  runEvents(runId: string, handlers: EventHandlers, after?: number): Unsubscribe;
  cancelRun(runId: string): Promise<void>;
  /** Answers a run's question `ask`: may the external tool's call run? */
  answerApproval(runId: string, ask: number, allow: boolean): Promise<void>;
  rateRun(runId: string, rating: Rating): Promise<void>;
  sessions(search?: string): Promise<SessionInfo[]>;
  session(id: string): Promise<SessionRuns>;
  deleteSession(id: string): Promise<void>;
  /** Training data from rated runs, as a file the user can save (or has saved). */
  exportData(format: 'sft' | 'alpaca', feedback: 'good' | 'any'): Promise<ExportResult>;
  /** The files a training run may read (the exports folder's). */
  trainingData(): Promise<TrainingData>;
  /** Starts `catena train sft` as a child process. */
  startTraining(request: TrainingRequest): Promise<TrainingStatus>;
  /** The training runs of this server or app, newest first (without their events). */
  trainingRuns(): Promise<TrainingStatus[]>;
  /** A training run with its progress events from index `from` on. */
  trainingRun(id: string, from: number): Promise<TrainingStatus>;
  /** Stops a training run after its current step (it checkpoints first). */
  stopTraining(id: string): Promise<TrainingStatus>;
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
