// The transport of the desktop app: Tauri commands, and a Tauri channel per followed run. The
// commands are thin calls into the same service (catena-service) that `catena serve`'s HTTP API uses.

import { Channel, invoke } from '@tauri-apps/api/core';
import { ApiError, type EventHandlers, type ExportResult, type Transport, type Unsubscribe } from './transport';
import type { RunEvent, DownloadStatus, Health, ImportRequest, LibraryModels, List, ModelRow, Profile, Rating, RunOptions, ServedModel, SessionInfo, SessionRuns, StartedRun, ToolStatus, TrainingData, TrainingRequest, TrainingStatus, Vote, WebSettings, WebSettingsUpdate } from './types';

/** One message of a followed run's channel. */
export type FollowMessage = { seq: number; event: RunEvent } | { end: true; error?: string };

type Invoke = <T>(command: string, args?: Record<string, unknown>) => Promise<T>;

/** The app's `{status, message}` error (or anything else a command threw) as an ApiError. */
function asApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e && typeof e === 'object' && 'message' in e) {
    const { status, message } = e as { status?: number; message: unknown };
    return new ApiError(typeof status === 'number' ? status : 500, String(message));
  }
  return new ApiError(500, String(e));
}

export class TauriTransport implements Transport {
  constructor(private readonly call: Invoke = invoke) {}

  private async command<T>(name: string, args?: Record<string, unknown>): Promise<T> {
    try {
      return await this.call<T>(name, args);
    } catch (e) {
      throw asApiError(e);
    }
  }

  /** Tells the app the window can be used (it logs and measures cold start from this). */
  windowReady(): Promise<void> {
    return this.command('window_ready');
  }

  health(): Promise<Health> {
    return this.command('health');
  }

  async profiles(): Promise<Profile[]> {
    return (await this.command<List<Profile>>('profiles')).data;
  }

  async models(): Promise<ModelRow[]> {
    return (await this.command<LibraryModels>('library_models')).data;
  }

  async tools(): Promise<ToolStatus[]> {
    return (await this.command<List<ToolStatus>>('tools')).data;
  }

  webSettings(): Promise<WebSettings> {
    return this.command('web_settings');
  }

  saveWebSettings(update: WebSettingsUpdate): Promise<WebSettings> {
    return this.command('update_web_settings', { update });
  }

  pullModel(id: string): Promise<DownloadStatus> {
    return this.command('pull_model', { id });
  }

  async downloads(): Promise<DownloadStatus[]> {
    return (await this.command<List<DownloadStatus>>('downloads')).data;
  }

  importFolder(request: ImportRequest): Promise<DownloadStatus> {
    return this.command('import_folder', { request });
  }

  serveModel(id: string): Promise<ServedModel> {
    return this.command('serve_model', { id });
  }

  trainingData(): Promise<TrainingData> {
    return this.command('training_data');
  }

  startTraining(request: TrainingRequest): Promise<TrainingStatus> {
    return this.command('start_training', { request });
  }

  async trainingRuns(): Promise<TrainingStatus[]> {
    return (await this.command<List<TrainingStatus>>('training_runs')).data;
  }

  trainingRun(id: string, from: number): Promise<TrainingStatus> {
    return this.command('training_run', { id, from });
  }

  stopTraining(id: string): Promise<TrainingStatus> {
    return this.command('stop_training', { id });
  }

  startRun(options: RunOptions): Promise<StartedRun> {
    return this.command('start_run', { options });
  }

  vote(runs: string[]): Promise<Vote> {
    return this.command('vote', { request: { runs } });
  }

  runEvents(runId: string, handlers: EventHandlers, after = 0): Unsubscribe {
    let ended = false;
    let followId: number | null = null;
    let stopped = false;
    const end = (error?: string) => {
      if (!ended) {
        ended = true;
        handlers.onEnd(error);
      }
    };
    const channel = new Channel<FollowMessage>((message) => {
      if (ended) return;
      if ('end' in message) end(message.error);
      else handlers.onEvent(message.event, message.seq);
    });
    this.command<number>('follow_run', { runId, after, onEvent: channel }).then(
      (id) => {
        followId = id;
        if (stopped) this.unfollow(id);
      },
      (e: unknown) => end(asApiError(e).message),
    );
    return () => {
      stopped = true;
      if (followId !== null) this.unfollow(followId);
      end();
    };
  }

  private unfollow(followId: number): void {
    this.command('unfollow_run', { followId }).catch(() => {
      // The app is closing: nothing left to stop.
    });
  }

  async cancelRun(runId: string): Promise<void> {
    await this.command('cancel_run', { runId });
  }

  async answerApproval(runId: string, ask: number, allow: boolean): Promise<void> {
    await this.command('answer_approval', { runId, ask, allow });
  }

  async rateRun(runId: string, rating: Rating): Promise<void> {
    await this.command('rate_run', { runId, rating });
  }

  async sessions(search?: string): Promise<SessionInfo[]> {
    return (await this.command<List<SessionInfo>>('sessions', { search: search ?? null })).data;
  }

  session(id: string): Promise<SessionRuns> {
    return this.command('session', { id });
  }

  async deleteSession(id: string): Promise<void> {
    await this.command('delete_session', { id });
  }

  async exportData(format: 'sft' | 'alpaca', feedback: 'good' | 'any'): Promise<ExportResult> {
    return { savedTo: await this.command<string>('export_data', { format, feedback }) };
  }
}
