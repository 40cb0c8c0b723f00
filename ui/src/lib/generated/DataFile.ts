// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * One file of the exports folder.
 */
export type DataFile = { name: string, bytes: number, };
