// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Where a run just started stands: always queued, since the model takes requests in order.
 */
export type StartedStatus = "queued";
