// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * The model served after a switch.
 */
export type ServedModel = { model: string, architecture: string, path: string, };
