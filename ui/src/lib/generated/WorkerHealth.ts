// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * The model's worker process.
 */
export type WorkerHealth = { pid: number, alive: boolean, restarts: number, };
