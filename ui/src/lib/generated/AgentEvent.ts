// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { DecidedBy } from "./DecidedBy";
import type { ParseIssue } from "./ParseIssue";
import type { Source } from "./Source";
import type { StopReason } from "./StopReason";
import type { Tag } from "./Tag";

/**
 * One event of a run, in order. Serialised with a `type` field (`block_started`, ...).
 */
export type AgentEvent = { "type": "run_started", profile: string, model: string, 
/**
 * Tokens of the rendered prompt.
 */
prompt_tokens: number, 
/**
 * Of those, tokens found already evaluated in a kept KV cache.
 */
cached_tokens: number, context_size: number, seed: number, temperature: number, } | { "type": "block_started", tag: Tag, source: Source, } | { "type": "block_delta", tag: Tag, text: string, source: Source, } | { "type": "block_ended", tag: Tag, content: string, 
/**
 * Whether the block ended with its own closing tag.
 */
closed: boolean, source: Source, } | { "type": "text", text: string, source: Source, } | { "type": "parse_issue", issue: ParseIssue, message: string, } | { "type": "tool_call", 
/**
 * 1-based number of the call in this run.
 */
index: number, tool: Tag, input: string, } | { "type": "observation", index: number, tool: Tag, 
/**
 * The observation text as the model reads it (inside the `<observation>` tags).
 */
text: string, success: boolean, 
/**
 * The call repeated an earlier one and was answered by the duplicate guard.
 */
duplicate: boolean, elapsed_ms: number, } | { "type": "approval_requested", 
/**
 * Names the question within the run, for the answer.
 */
ask: number, 
/**
 * The MCP server, as named in mcp.json.
 */
server: string, 
/**
 * The tool, as the model called it.
 */
tool: string, 
/**
 * The call's arguments, as JSON text.
 */
arguments: string, } | { "type": "approval_answered", ask: number, allowed: boolean, decided_by: DecidedBy, } | { "type": "answer_asked", reason: StopReason, };
