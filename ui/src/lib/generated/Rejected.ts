// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A sample left out of training, and why.
 */
export type Rejected = { origin: string, reason: string, };
