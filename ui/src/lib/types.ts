// The shapes `catena serve` sends (see crates/server, crates/service and crates/agent/src/events.rs).

export type Source = 'model' | 'prefill';

/** One event of an agent run, as stored and streamed. `seq` is the SSE id. */
export type AgentEvent =
  | { type: 'run_started'; profile: string; model: string; prompt_tokens: number; cached_tokens: number; context_size: number; seed: number; temperature: number }
  | { type: 'block_started'; tag: string; source: Source }
  | { type: 'block_delta'; tag: string; text: string; source: Source }
  | { type: 'block_ended'; tag: string; content: string; closed: boolean; source: Source }
  | { type: 'text'; text: string; source: Source }
  | { type: 'parse_issue'; message: string }
  | { type: 'tool_call'; index: number; tool: string; input: string }
  | { type: 'observation'; index: number; tool: string; text: string; success: boolean; duplicate: boolean; elapsed_ms: number }
  | { type: 'summary'; answer: string | null; stop_reason: string; tool_calls: number; generated_tokens: number; context_tokens: number; timings?: Record<string, number> }
  | { type: 'error'; message: string };

export interface Profile {
  name: string;
  description: string;
  tools: string[];
  max_tool_calls: number;
}

/** Whether a tool call a model may make gets a real answer here, and from what. */
export interface ToolStatus {
  tool: string;
  ready: boolean;
  detail: string;
}

export type SearchBackend = 'local' | 'searxng' | 'serper' | 'brave' | 'tavily';
export type KeyName = 'serper' | 'brave' | 'tavily' | 'summarizer';

/** The `[web]` settings as the server shows them: keys never leave it, only whether each is set. */
export interface WebSettings {
  search: SearchBackend;
  index: string | null;
  online: boolean;
  searxng_url: string | null;
  summarizer_url: string | null;
  summarizer_model: string | null;
  page_timeout: number | null;
  keys: Record<KeyName, { in_settings: boolean; in_environment: boolean }>;
  document_indexes: string[];
}

/** A change to the `[web]` settings: fields left out keep their value; an empty key removes it. */
export interface WebSettingsUpdate {
  search?: SearchBackend;
  index?: string;
  online?: boolean;
  searxng_url?: string;
  summarizer_url?: string;
  summarizer_model?: string;
  page_timeout?: number;
  keys?: Partial<Record<KeyName, string>>;
}

export interface RunOptions {
  task: string;
  profile: string;
  prefill?: string;
  session_id?: string;
  max_tool_calls?: number;
  max_tokens?: number;
  max_time?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
}

export interface StartedRun {
  id: string;
  session_id: string;
  status: string;
}

export type Rating = 'good' | 'bad' | null;

export interface RunRecord {
  id: string;
  session_id: string;
  kind: string;
  status: string;
  task: string;
  profile: string | null;
  model: string;
  answer: string | null;
  stop_reason: string | null;
  feedback: Rating;
  started_ms: number;
  finished_ms: number | null;
  live?: boolean;
}

export interface SessionSummary {
  id: string;
  title: string;
  runs: number;
  created_ms: number;
  updated_ms: number;
}

export interface ModelRow {
  id: string;
  quant: string | null;
  file: string;
  size: number | null;
  size_is_estimate: boolean;
  profile: string | null;
  license: string | null;
  installed: boolean;
  default: boolean;
  path: string;
  source: string;
}

/** A model download (or a checkpoint pull or folder import) started from the UI. */
export interface DownloadStatus {
  id: string;
  state: 'running' | 'verifying' | 'done' | 'failed';
  /** For checkpoints: the stage running; the bytes are that stage's. */
  stage: 'download' | 'convert' | 'quantize' | null;
  done_bytes: number;
  total_bytes: number | null;
  message: string | null;
  path: string | null;
}

/** A Hugging Face checkpoint folder to convert and install (desktop app only). */
export interface ImportRequest {
  dir: string;
  name: string;
  quant: 'Q4_K_M' | 'Q5_K_M' | 'Q8_0' | 'F16';
  profile: string | null;
}

export interface Health {
  /** `ok`; in the desktop app also `loading` (with `message`) and `failed`. */
  status: string;
  message?: string;
  model: string;
  /** The adapter Catena ships for the served model (the default model's), when it is applied. */
  adapter?: string | null;
  architecture: string;
  version: string;
  in_flight: number;
  queue_limit: number;
  worker?: { pid: number; alive: boolean; restarts: number };
}

/** A training run to start (the flags of `catena train sft`). */
/** The files training may read: the exports folder's, by name. */
export interface TrainingData {
  folder: string;
  data: { name: string; bytes: number }[];
}

export interface TrainingRequest {
  /** A file name in the exports folder (see `TrainingData`). */
  data: string;
  /** The adapter's name; it goes to Catena's adapters folder. */
  out?: string;
  /** An installed model (catalog id or file name); default: the served model. */
  base?: string;
  rank?: number;
  alpha?: number;
  lr?: number;
  epochs?: number;
  batch_tokens?: number;
  max_steps?: number;
}

/** One line of the trainer's JSON progress (`SftEvent` in crates/train-events). */
export type TrainingEvent =
  | { event: 'prepared'; train_samples: number; eval_samples: number; total_steps: number; trainable_parameters: number; rejected: { origin: string; reason: string }[] }
  | { event: 'resumed'; step: number; checkpoint: string }
  | { event: 'step'; step: number; total_steps: number; loss: number; lr: number; tokens_per_second: number; eta_seconds: number; elapsed_seconds: number }
  | { event: 'eval'; step: number; loss: number }
  | { event: 'checkpoint'; step: number; path: string }
  | { event: 'stopped'; step: number; checkpoint: string }
  | { event: 'finished'; steps: number; adapter: string; peft: string; loss_curve: string; final_eval_loss: number | null };

/** A training run and its events from index `from` on. */
export interface TrainingStatus {
  id: string;
  status: 'running' | 'finished' | 'stopped' | 'failed';
  data: string;
  out: string;
  events: TrainingEvent[];
  from: number;
  error: string | null;
}
