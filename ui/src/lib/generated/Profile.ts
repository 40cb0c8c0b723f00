// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Tag } from "./Tag";

/**
 * A built-in prompt profile, as the run form offers it.
 */
export type Profile = { name: string, description: string, 
/**
 * The tools it gives a run.
 */
tools: Array<Tag>, max_tool_calls: number, };
