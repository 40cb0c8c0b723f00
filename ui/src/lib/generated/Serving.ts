// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { WorkerHealth } from "./WorkerHealth";

/**
 * The served model, the queue and the worker process.
 */
export type Serving = { model: string, architecture: string, 
/**
 * The adapter Catena ships for the served model (the default model's), when applied.
 */
adapter: string | null, 
/**
 * The context window each conversation gets, in tokens: a prompt and its answer together
 * must fit in it (coding agents send prompts of 10,000 tokens and more).
 */
context_size: number, version: string, uptime_s: number, 
/**
 * Requests waiting for or using the model.
 */
in_flight: number, queue_limit: number, live_runs: number, worker: WorkerHealth, };
