// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { DownloadState } from "./DownloadState";
import type { Stage } from "./Stage";

/**
 * One download or import, as the UI shows it.
 */
export type DownloadStatus = { 
/**
 * The catalog reference it was started with (or the imported model's name).
 */
id: string, state: DownloadState, 
/**
 * For checkpoints: the stage running (download, convert, quantize); the bytes are that
 * stage's.
 */
stage: Stage | null, done_bytes: number, total_bytes: number | null, 
/**
 * The last retry or restart, while running; the reason, when failed.
 */
message: string | null, 
/**
 * The installed file, when done.
 */
path: string | null, };
