// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A stage of an import; the CLI draws one bar per stage and the UI one line.
 */
export type Stage = "download" | "convert" | "quantize";
