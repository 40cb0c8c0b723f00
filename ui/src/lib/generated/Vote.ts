// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { VoteChain } from "./VoteChain";
import type { VoteGroup } from "./VoteGroup";

/**
 * The count: groups largest first (ties to the more likely), the first one wins.
 */
export type Vote = { chains: Array<VoteChain>, groups: Array<VoteGroup>, 
/**
 * Runs without an answer (or, for programs, without one that could run).
 */
abstained: Array<string>, 
/**
 * The winning group's answer; `None` when every run abstained.
 */
answer: string | null, };
