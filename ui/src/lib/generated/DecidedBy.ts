// Generated from the Rust types by ts-rs (`scripts/setup/ui.sh types`). Do not edit by hand.

/**
 * Who settled a question about an external tool's call ([`AgentEvent::ApprovalAnswered`]).
 */
export type DecidedBy = "user" | "timeout" | "cancelled";
