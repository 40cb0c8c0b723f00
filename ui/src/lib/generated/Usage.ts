// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Token counts of a run.
 */
export type Usage = { prompt_tokens: number, generated_tokens: number, context_tokens: number, 
/**
 * Prompt tokens found already evaluated in a kept KV cache.
 */
cached_tokens: number, tool_calls: number, };
