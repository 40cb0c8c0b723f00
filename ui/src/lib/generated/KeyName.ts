// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * The API keys the `[web]` settings hold: the three search services' and the summariser's.
 */
export type KeyName = "serper" | "brave" | "tavily" | "summarizer";
