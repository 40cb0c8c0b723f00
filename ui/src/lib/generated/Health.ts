// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Serving } from "./Serving";

/**
 * Whether a model is there to answer (`GET /health`, the desktop app's `health` command). The
 * desktop app opens its window before the model has loaded, so it can also be loading or have
 * failed to load; `catena serve` answers only once the model is loaded.
 */
export type Health = { "status": "ok" } & Serving | { "status": "loading", message: string, } | { "status": "failed", message: string, };
