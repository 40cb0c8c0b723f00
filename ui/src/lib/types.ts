// The shapes `catena serve` and the desktop app send and take. Most are generated from the Rust
// types (ts-rs) into ./generated: never edit those by hand; after changing a Rust type, run
// `scripts/setup/ui.sh types` and commit the result (catena-service's test `typescript` fails while
// they differ). Written here by hand: the union of a run's events (`RunEvent`) and the desktop app's
// import request.

export type { AgentEvent } from './generated/AgentEvent';
export type { Connection } from './generated/Connection';
export type { DataFile } from './generated/DataFile';
export type { DecidedBy } from './generated/DecidedBy';
export type { DownloadState } from './generated/DownloadState';
export type { DownloadStatus } from './generated/DownloadStatus';
export type { Feedback } from './generated/Feedback';
export type { Health } from './generated/Health';
export type { KeyName } from './generated/KeyName';
export type { KeyState } from './generated/KeyState';
export type { KeyStates } from './generated/KeyStates';
export type { LibraryModels } from './generated/LibraryModels';
export type { List } from './generated/List';
export type { ModelRow } from './generated/ModelRow';
export type { Profile } from './generated/Profile';
export type { RunFeedback } from './generated/RunFeedback';
export type { RunKind } from './generated/RunKind';
export type { RunOptions } from './generated/RunOptions';
export type { ParseIssue } from './generated/ParseIssue';
export type { RunRecord } from './generated/RunRecord';
export type { RunStatus } from './generated/RunStatus';
export type { RunSummary } from './generated/RunSummary';
export type { RunView } from './generated/RunView';
export type { ServedModel } from './generated/ServedModel';
export type { Serving } from './generated/Serving';
export type { SessionInfo } from './generated/SessionInfo';
export type { SessionRuns } from './generated/SessionRuns';
export type { SftEvent } from './generated/SftEvent';
export type { Source } from './generated/Source';
export type { Stage } from './generated/Stage';
export type { StartedRun } from './generated/StartedRun';
export type { StopReason } from './generated/StopReason';
export type { Tag } from './generated/Tag';
export type { Timings } from './generated/Timings';
export type { Vote } from './generated/Vote';
export type { VoteChain } from './generated/VoteChain';
export type { VoteGroup } from './generated/VoteGroup';
export type { ToolStatus } from './generated/ToolStatus';
export type { TrainingData } from './generated/TrainingData';
export type { TrainingRequest } from './generated/TrainingRequest';
export type { TrainingState } from './generated/TrainingState';
export type { TrainingStatus } from './generated/TrainingStatus';
export type { WebSettings } from './generated/WebSettings';
export type { WebSettingsUpdate } from './generated/WebSettingsUpdate';

import type { AgentEvent } from './generated/AgentEvent';
import type { Feedback } from './generated/Feedback';
import type { RunSummary } from './generated/RunSummary';

/** A run's rating as the UI sets it: `null` clears it. */
export type Rating = Feedback | null;

/**
 * One event of an agent run, as stored and streamed (`seq` is the SSE id): what the run reports
 * as it goes, then the `summary` (a `RunSummary` with its `type`) or an `error` that the store's
 * recorder writes as JSON at its end. A run the store failed during ends its live stream with a
 * `not_saved` event, which is not stored.
 */
export type RunEvent =
  | AgentEvent
  | ({ type: 'summary' } & RunSummary)
  | { type: 'error'; message: string }
  | { type: 'not_saved'; message: string };

/** A Hugging Face checkpoint folder to convert and install (desktop app only). */
export interface ImportRequest {
  dir: string;
  name: string;
  quant: 'Q4_K_M' | 'Q5_K_M' | 'Q8_0' | 'F16';
  profile: string | null;
}
