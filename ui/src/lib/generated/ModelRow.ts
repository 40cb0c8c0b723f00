// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * One model: a catalog file (installed or not) or a downloaded file outside the catalog.
 */
export type ModelRow = { id: string, quant: string | null, file: string, 
/**
 * Exact size if known (installed files, pinned entries), else the catalog's estimate.
 */
size: number | null, size_is_estimate: boolean, profile: string | null, license: string | null, installed: boolean, default: boolean, path: string, 
/**
 * hub, url, registry, or download (not in the catalog).
 */
source: string, };
