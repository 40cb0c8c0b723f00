// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * What the vote read of one run.
 */
export type VoteChain = { run_id: string, seed: number | null, 
/**
 * Every block closed in order and an `<answer>` the verifier reads last.
 */
valid: boolean, answer: string | null, 
/**
 * Mean log-probability of the run's sampled tokens; `None` when they were not recorded.
 */
mean_logprob: number | null, };
