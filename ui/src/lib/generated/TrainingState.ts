// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Where a training run started from a UI stands.
 */
export type TrainingState = "running" | "finished" | "stopped" | "failed";
