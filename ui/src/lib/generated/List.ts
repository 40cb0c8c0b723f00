// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A list in the shape of OpenAI's list objects (`{"object": "list", "data": [...]}`), which
 * every list route of the server sends.
 */
export type List<T> = { object: "list", data: Array<T>, };
