// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * One block kind of a CoA trajectory.
 */
export type Tag = "think" | "plan" | "reflection" | "suggested_answer" | "double_check" | "answer" | "code" | "web_search" | "crawl_page" | "wiki_search" | "visual_inspector" | "tool_call" | "observation";
