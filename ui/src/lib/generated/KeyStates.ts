// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { KeyState } from "./KeyState";

/**
 * The state of every key the `[web]` settings can hold, one field per [`KeyName`].
 */
export type KeyStates = { serper: KeyState, brave: KeyState, tavily: KeyState, summarizer: KeyState, };
