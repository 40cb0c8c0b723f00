// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { StartedStatus } from "./StartedStatus";

/**
 * A run that was queued.
 */
export type StartedRun = { 
/**
 * The first run (the only one unless the request asked for samples).
 */
id: string, session_id: string, status: StartedStatus, 
/**
 * Every run the request started, in seed order: `[id]` for one.
 */
samples: Array<string>, };
