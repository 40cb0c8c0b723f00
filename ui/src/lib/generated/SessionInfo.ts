// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A session in a list.
 */
export type SessionInfo = { id: string, title: string, created_ms: number, updated_ms: number, runs: number, };
