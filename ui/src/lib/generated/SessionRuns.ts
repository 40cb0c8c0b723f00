// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { RunRecord } from "./RunRecord";

/**
 * A session's runs, oldest first.
 */
export type SessionRuns = { id: string, runs: Array<RunRecord>, };
