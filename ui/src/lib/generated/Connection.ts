// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * How an editor or a coding agent reaches `catena serve` (`GET /v1/connection`, read by the
 * UI's page for connecting an editor). Only the server has it: the desktop app runs no HTTP
 * server of its own.
 */
export type Connection = { 
/**
 * The OpenAI-compatible API's base URL at the address the server listens on, e.g.
 * `http://127.0.0.1:8420/v1` (loopback when it listens on every address).
 */
base_url: string, 
/**
 * The key requests must carry as `Authorization: Bearer <key>`, when the server was started
 * with one (`--api-key`, `CATENA_API_KEY`); `null` when it takes requests without. Sent only
 * to a caller that already holds the key or the web UI's launch token (which may do all the
 * key may while this server runs), so the user can hand it to an editor; the page shows it
 * only when asked.
 */
api_key: string | null, };
