// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Where the time went.
 */
export type Timings = { total_ms: number, 
/**
 * Evaluating appended text (prompt, prefill, observations).
 */
prefill_ms: number, 
/**
 * Generating, one token at a time.
 */
decode_ms: number, 
/**
 * Running tools.
 */
tools_ms: number, prefill_tokens_per_s: number, decode_tokens_per_s: number, };
