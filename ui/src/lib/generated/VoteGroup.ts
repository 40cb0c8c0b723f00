// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Answers the verifier could not tell apart.
 */
export type VoteGroup = { 
/**
 * The answer of the group's most likely run, as it wrote it.
 */
answer: string, 
/**
 * The group's runs, in the order they were asked about.
 */
runs: Array<string>, 
/**
 * The most likely of them: it speaks for the group.
 */
best: string, mean_logprob: number | null, };
