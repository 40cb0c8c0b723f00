// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.
import type { Tag } from "./Tag";

/**
 * Something the model wrote that breaks the protocol; the parser recovers and reports it.
 */
export type ParseIssue = { "kind": "nested_tag", open: Tag, found: Tag, } | { "kind": "mismatched_close", open: Tag, found: Tag, } | { "kind": "stray_close", found: Tag, } | { "kind": "unclosed", open: Tag, } | { "kind": "unclosed_fence", open: Tag | null, };
