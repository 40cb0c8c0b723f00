// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Feedback } from "./Feedback";
import type { RunKind } from "./RunKind";
import type { RunStatus } from "./RunStatus";
import type { Usage } from "./Usage";
import type { JsonValue } from "./serde_json/JsonValue";

/**
 * A stored run, with whether it is still running in this process.
 */
export type RunView = { live: boolean, id: string, session_id: string, kind: RunKind, status: RunStatus, task: string, profile: string | null, model: string, adapter: string | null, options: JsonValue, system_prompt: string, user_prompt: string, started_ms: number, finished_ms: number | null, answer: string | null, stop_reason: string | null, trajectory: string | null, summary: JsonValue | null, error: string | null, usage: Usage, feedback: Feedback | null, feedback_note: string | null, };
