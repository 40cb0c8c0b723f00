// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { ModelRow } from "./ModelRow";

/**
 * The models page: every catalog file and installed model, and the one being served.
 */
export type LibraryModels = { object: "list", 
/**
 * The served model's file.
 */
serving: string, data: Array<ModelRow>, };
