// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * What kind of run.
 */
export type RunKind = "agent" | "chat";
