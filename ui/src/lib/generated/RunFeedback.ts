// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Feedback } from "./Feedback";

/**
 * A run's rating after it was set or cleared.
 */
export type RunFeedback = { id: string, feedback: Feedback | null, feedback_note: string | null, };
