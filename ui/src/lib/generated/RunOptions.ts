// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A run to start. Catena's own API: a field it does not know is an error (a misspelt budget
 * would otherwise be dropped without a word).
 */
export type RunOptions = { task: string, profile?: string, prefill?: string, 
/**
 * Continue an existing session.
 */
session_id?: string, max_tool_calls?: number, max_tokens?: number, 
/**
 * Seconds.
 */
max_time?: number, temperature?: number, top_p?: number, top_k?: number, seed?: number, 
/**
 * Let the model write freely instead of holding its chain to the protocol's grammar.
 */
free?: boolean, 
/**
 * How many chains of the task to run, 1 to [`MAX_SAMPLES`]: each is a run of its own in
 * one session, seeds `seed` to `seed + samples - 1`, for [`Service::vote`] to compare.
 * More than one needs a temperature above 0 (greedy chains would all be the same).
 */
samples?: number, };
