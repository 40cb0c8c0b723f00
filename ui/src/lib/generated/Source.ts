// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Who wrote a block: the model, the caller's `--prefill`, or Catena itself.
 */
export type Source = "model" | "prefill" | "runtime";
