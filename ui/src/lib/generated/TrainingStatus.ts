// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { SftEvent } from "./SftEvent";
import type { TrainingState } from "./TrainingState";

/**
 * A training run as the UI sees it.
 */
export type TrainingStatus = { id: string, status: TrainingState, data: string, out: string, 
/**
 * The trainer's events from index `from` on (`prepared`, `step`, `eval`, `finished`...).
 */
events: Array<SftEvent>, 
/**
 * Index of the first event of `events`; ask for `from + events.len()` next.
 */
from: number, error: string | null, };
