// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Answers the verifier could not tell apart.
 */
export type VoteGroup = { 
/**
 * The answer of the group's most likely run, as it wrote it, or as `\boxed{N}` when that
 * run counted for the number its program printed.
 */
answer: string, 
/**
 * The group's runs, in the order they were asked about.
 */
runs: Array<string>, 
/**
 * The most likely of them: it speaks for the group.
 */
best: string, mean_logprob: number | null, 
/**
 * One of the runs' own programs printed the group's value (math answers).
 */
printed: boolean, 
/**
 * Runs that counted for the number their last program printed rather than for their
 * answer, which none of their programs printed.
 */
from_output: Array<string>, };
