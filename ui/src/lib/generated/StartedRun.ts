// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { StartedStatus } from "./StartedStatus";

/**
 * A run that was queued.
 */
export type StartedRun = { id: string, session_id: string, status: StartedStatus, };
