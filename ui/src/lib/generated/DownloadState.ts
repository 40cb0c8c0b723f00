// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Where one download stands.
 */
export type DownloadState = "running" | "verifying" | "done" | "failed";
