// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { DataFile } from "./DataFile";

/**
 * The files a training run may read: the exports folder's, by name (a request names a file,
 * never a path).
 */
export type TrainingData = { folder: string, data: Array<DataFile>, };
