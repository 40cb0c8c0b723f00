// The transport of the browser build: `catena serve`'s HTTP API and its SSE event streams.

import { currentToken } from './credential';
import { SseParser } from './sse';
import { ApiError, type EventHandlers, type ExportResult, type Transport, type Unsubscribe } from './transport';
import type { Connection, RunEvent, DownloadStatus, Health, LibraryModels, List, ModelRow, Profile, Rating, RunOptions, ServedModel, SessionInfo, SessionRuns, StartedRun, ToolStatus, TrainingData, TrainingRequest, TrainingStatus, Vote, WebSettings, WebSettingsUpdate } from './types';
import { errorText } from './format';

type Fetch = typeof fetch;

/** `fetch` with the tab's credential (when it has one) as a bearer token. */
export function authorizedFetch(token: () => string | null = () => currentToken(), inner: Fetch = fetch): Fetch {
  return (input, init) => {
    const credential = token();
    if (!credential) return inner(input, init);
    const headers = new Headers(init?.headers);
    headers.set('Authorization', `Bearer ${credential}`);
    return inner(input, { ...init, headers });
  };
}

export class HttpTransport implements Transport {
  constructor(
    private readonly base = '',
    private readonly fetcher: Fetch = authorizedFetch(),
  ) {}

  private async request<T>(path: string, init?: RequestInit): Promise<T> {
    const response = await this.fetcher(this.base + path, init);
    if (!response.ok) throw await errorOf(response);
    return (await response.json()) as T;
  }

  private post<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  health(): Promise<Health> {
    return this.request('/health');
  }

  connection(): Promise<Connection> {
    return this.request('/v1/connection');
  }

  async profiles(): Promise<Profile[]> {
    return (await this.request<List<Profile>>('/v1/profiles')).data;
  }

  async models(): Promise<ModelRow[]> {
    return (await this.request<LibraryModels>('/v1/library/models')).data;
  }

  async tools(): Promise<ToolStatus[]> {
    return (await this.request<List<ToolStatus>>('/v1/tools')).data;
  }

  webSettings(): Promise<WebSettings> {
    return this.request('/v1/settings/web');
  }

  saveWebSettings(update: WebSettingsUpdate): Promise<WebSettings> {
    return this.request('/v1/settings/web', {
      method: 'PUT',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(update),
    });
  }

  pullModel(id: string): Promise<DownloadStatus> {
    return this.post('/v1/library/downloads', { id });
  }

  async downloads(): Promise<DownloadStatus[]> {
    return (await this.request<List<DownloadStatus>>('/v1/library/downloads')).data;
  }

  serveModel(id: string): Promise<ServedModel> {
    return this.post('/v1/library/models/serve', { id });
  }

  startRun(options: RunOptions): Promise<StartedRun> {
    return this.post('/v1/agent/runs', options);
  }

  vote(runs: string[]): Promise<Vote> {
    return this.post('/v1/agent/votes', { runs });
  }

  trainingData(): Promise<TrainingData> {
    return this.request('/v1/train/data');
  }

  startTraining(request: TrainingRequest): Promise<TrainingStatus> {
    return this.post('/v1/train/runs', request);
  }

  async trainingRuns(): Promise<TrainingStatus[]> {
    return (await this.request<List<TrainingStatus>>('/v1/train/runs')).data;
  }

  trainingRun(id: string, from: number): Promise<TrainingStatus> {
    return this.request(`/v1/train/runs/${encodeURIComponent(id)}?from=${from}`);
  }

  stopTraining(id: string): Promise<TrainingStatus> {
    return this.post(`/v1/train/runs/${encodeURIComponent(id)}/stop`, {});
  }

  runEvents(runId: string, handlers: EventHandlers, after = 0): Unsubscribe {
    const abort = new AbortController();
    let ended = false;
    const end = (error?: string) => {
      if (!ended) {
        ended = true;
        handlers.onEnd(error);
      }
    };
    const url = `${this.base}/v1/agent/runs/${encodeURIComponent(runId)}/events?after=${after}`;
    (async () => {
      const response = await this.fetcher(url, { signal: abort.signal, headers: { Accept: 'text/event-stream' } });
      if (!response.ok || !response.body) throw await errorOf(response);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new SseParser();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const message of parser.push(value)) {
          let event: RunEvent;
          try {
            event = JSON.parse(message.data) as RunEvent;
          } catch {
            continue;
          }
          handlers.onEvent(event, message.id);
        }
      }
      end();
    })().catch((e: unknown) => {
      if (abort.signal.aborted) end();
      else end(errorText(e));
    });
    return () => abort.abort();
  }

  async cancelRun(runId: string): Promise<void> {
    await this.post(`/v1/agent/runs/${encodeURIComponent(runId)}/cancel`, {});
  }

  async answerApproval(runId: string, ask: number, allow: boolean): Promise<void> {
    await this.post(`/v1/agent/runs/${encodeURIComponent(runId)}/approvals/${ask}`, { allow });
  }

  async rateRun(runId: string, rating: Rating): Promise<void> {
    await this.post(`/v1/agent/runs/${encodeURIComponent(runId)}/feedback`, { rating });
  }

  async sessions(search?: string): Promise<SessionInfo[]> {
    const query = search ? `?search=${encodeURIComponent(search)}` : '';
    return (await this.request<List<SessionInfo>>(`/v1/sessions${query}`)).data;
  }

  session(id: string): Promise<SessionRuns> {
    return this.request(`/v1/sessions/${encodeURIComponent(id)}`);
  }

  async deleteSession(id: string): Promise<void> {
    const response = await this.fetcher(`${this.base}/v1/sessions/${encodeURIComponent(id)}`, { method: 'DELETE' });
    if (!response.ok) throw await errorOf(response);
  }

  async exportData(format: 'sft' | 'alpaca', feedback: 'good' | 'any'): Promise<ExportResult> {
    const response = await this.fetcher(`${this.base}/v1/export?format=${format}&feedback=${feedback}`);
    if (!response.ok) throw await errorOf(response);
    const fileName = format === 'sft' ? 'catena-sft.jsonl' : 'catena-alpaca.json';
    return { blob: await response.blob(), fileName };
  }
}

/** The server's message for a refused request, or the status line. */
async function errorOf(response: Response): Promise<ApiError> {
  if (response.status === 401) {
    return new ApiError(
      401,
      'This server needs a key. Open the address `catena serve` printed (it ends in #token=…), or enter the API key in Settings.',
    );
  }
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = (await response.json()) as { error?: { message?: string } };
    if (body.error?.message) message = body.error.message;
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(response.status, message);
}
