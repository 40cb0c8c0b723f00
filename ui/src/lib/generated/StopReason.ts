// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Why a run ended.
 */
export type StopReason = "answer" | "end_of_turn" | "tool_budget" | "token_budget" | "time_budget" | "context_full" | "cancelled" | "repetition";
