// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * A training run to start (the flags of `catena train sft`).
 *
 * A request names files, never paths: whoever can reach the server (a UI, a script, a page
 * that got past the boundary) must not be able to make it read or write anywhere else.
 */
export type TrainingRequest = { 
/**
 * The trajectories (our JSONL or the AFM alpaca JSON): a file name in the exports folder,
 * `<data dir>/exports`.
 */
data: string, 
/**
 * The adapter's name; it goes to `<data dir>/adapters/<name>`. Default: the run's id.
 */
out?: string, 
/**
 * The base model: an installed model (a catalog id or a downloaded file's name). Default:
 * the model being served.
 */
base?: string, rank?: number, alpha?: number, lr?: number, epochs?: number, batch_tokens?: number, max_steps?: number, };
