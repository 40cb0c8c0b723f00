// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

export type KeyState = { in_settings: boolean, in_environment: boolean, };
