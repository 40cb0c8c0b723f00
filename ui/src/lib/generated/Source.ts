// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Who wrote a block: the model, or the caller's `--prefill`.
 */
export type Source = "model" | "prefill";
