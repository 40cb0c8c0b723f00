// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A run to start.
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
free?: boolean, };
