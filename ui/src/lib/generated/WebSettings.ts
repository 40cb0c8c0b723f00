// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { KeyStates } from "./KeyStates";

/**
 * The `[web]` settings as the UI shows them: every key is left out, only whether it is set.
 */
export type WebSettings = { search: string, index: string | null, online: boolean, searxng_url: string | null, summarizer_url: string | null, summarizer_model: string | null, page_timeout: number | null, 
/**
 * Per key: whether the settings file holds one and whether the environment sets one (which
 * comes first).
 */
keys: KeyStates, 
/**
 * The document indexes there are to choose from.
 */
document_indexes: Array<string>, };
