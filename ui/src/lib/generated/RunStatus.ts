// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Where a run stands.
 */
export type RunStatus = "running" | "finished" | "failed" | "cancelled" | "interrupted";
