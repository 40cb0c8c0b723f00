// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Rejected } from "./Rejected";

/**
 * What the SFT loop reports as it goes: the CLI draws a bar from these or prints them as JSON.
 */
export type SftEvent = { "event": "prepared", train_samples: number, eval_samples: number, rejected: Array<Rejected>, total_steps: number, trainable_parameters: number, weight_types: Array<string>, } | { "event": "resumed", step: number, checkpoint: string, } | { "event": "step", step: number, total_steps: number, epoch: number, loss: number, lr: number, grad_norm: number, tokens: number, tokens_per_second: number, elapsed_seconds: number, eta_seconds: number, } | { "event": "eval", step: number, loss: number, } | { "event": "checkpoint", step: number, path: string, } | { "event": "finished", steps: number, adapter: string, peft: string, loss_curve: string, final_eval_loss: number | null, } | { "event": "stopped", step: number, checkpoint: string, };
