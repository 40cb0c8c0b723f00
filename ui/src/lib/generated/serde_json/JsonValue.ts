// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]: JsonValue } | null;
