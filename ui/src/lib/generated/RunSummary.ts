// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { StopReason } from "./StopReason";
import type { Timings } from "./Timings";

/**
 * The result of a run.
 */
export type RunSummary = { 
/**
 * The content of the last `<answer>` (or, when a budget ended the run, of the last
 * `<suggested_answer>`).
 */
answer: string | null, stop_reason: StopReason, tool_calls: number, prompt_tokens: number, 
/**
 * Tokens in the KV cache at the end.
 */
context_tokens: number, 
/**
 * Tokens run through the model; equal to `context_tokens` because nothing is re-read.
 */
evaluated_tokens: number, generated_tokens: number, parse_issues: number, timings: Timings, 
/**
 * The whole assistant turn: prefill, generated text and observations.
 */
trajectory: string, 
/**
 * Mean log-probability of the tokens the model sampled, when the session recorded them
 * (`SessionOptions::logprobs`): how sure the model was of its chain, which breaks a tie
 * between equally large groups of a vote.
 */
mean_logprob?: number, 
/**
 * What the run's own `<code>` calls printed, in order, for those that exited with status 0
 * and printed something: read from the runtime's observations as it appended them, never
 * from the trajectory's text, where a model generating without the grammar can write an
 * `<observation>` of its own (PROTOCOL.md §8). A math vote checks answers against it.
 * Left out when empty, as in runs recorded before it was.
 */
printed?: Array<string>, };
