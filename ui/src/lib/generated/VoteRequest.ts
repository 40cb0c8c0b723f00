// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Runs to put to a vote: ended agent runs of one task with one profile.
 */
export type VoteRequest = { runs: Array<string>, };
