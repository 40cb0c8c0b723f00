// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * The user's verdict on a run.
 */
export type Feedback = "good" | "bad";
