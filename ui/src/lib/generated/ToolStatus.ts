// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Tag } from "./Tag";

/**
 * Whether a tool call gets a real answer here, and from what.
 */
export type ToolStatus = { 
/**
 * The tag a model writes (`web_search`).
 */
tool: Tag, ready: boolean, 
/**
 * What answers it, or what to do so something does.
 */
detail: string, };
