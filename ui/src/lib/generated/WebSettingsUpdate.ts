// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { KeyName } from "./KeyName";

/**
 * A change to the `[web]` settings from the UI. Fields left out keep their value; `keys` maps
 * a key's name to its new value, an empty one removing it. Keys are written to the settings
 * file (the owner's only) and never sent back.
 */
export type WebSettingsUpdate = { search?: string, 
/**
 * An empty name: the only index there is.
 */
index?: string, online?: boolean, searxng_url?: string, summarizer_url?: string, summarizer_model?: string, page_timeout?: number, keys?: { [key in KeyName]?: string }, };
