//! The tags of the Chain-of-Agents protocol (PROTOCOL.md §1).
//!
//! Every tag is ordinary text to the tokenizer; this module only names them and says who writes
//! each one.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One block kind of a CoA trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Tag {
    Think,
    Plan,
    Reflection,
    SuggestedAnswer,
    DoubleCheck,
    Answer,
    Code,
    WebSearch,
    CrawlPage,
    WikiSearch,
    VisualInspector,
    /// A call of an external tool (an MCP server's), Catena's extension: the published checkpoints
    /// never write it (PROTOCOL.md §1).
    ToolCall,
    Observation,
}

/// Who writes a block and what the runtime does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagKind {
    /// A role agent (thinker, planner, reflector, proposer, verifier): text only.
    Role,
    /// The final answer.
    Final,
    /// A tool call: the runtime executes it and appends an observation.
    Tool,
    /// Written by the runtime, never sampled.
    Environment,
}

impl Tag {
    /// Every tag, in a fixed order.
    pub const ALL: [Tag; 13] = [
        Tag::Think,
        Tag::Plan,
        Tag::Reflection,
        Tag::SuggestedAnswer,
        Tag::DoubleCheck,
        Tag::Answer,
        Tag::Code,
        Tag::WebSearch,
        Tag::CrawlPage,
        Tag::WikiSearch,
        Tag::VisualInspector,
        Tag::ToolCall,
        Tag::Observation,
    ];

    /// The name between the angle brackets.
    pub const fn name(self) -> &'static str {
        match self {
            Tag::Think => "think",
            Tag::Plan => "plan",
            Tag::Reflection => "reflection",
            Tag::SuggestedAnswer => "suggested_answer",
            Tag::DoubleCheck => "double_check",
            Tag::Answer => "answer",
            Tag::Code => "code",
            Tag::WebSearch => "web_search",
            Tag::CrawlPage => "crawl_page",
            Tag::WikiSearch => "wiki_search",
            Tag::VisualInspector => "visual_inspector",
            Tag::ToolCall => "tool_call",
            Tag::Observation => "observation",
        }
    }

    pub const fn kind(self) -> TagKind {
        match self {
            Tag::Think | Tag::Plan | Tag::Reflection | Tag::SuggestedAnswer | Tag::DoubleCheck => {
                TagKind::Role
            }
            Tag::Answer => TagKind::Final,
            Tag::Code
            | Tag::WebSearch
            | Tag::CrawlPage
            | Tag::WikiSearch
            | Tag::VisualInspector
            | Tag::ToolCall => TagKind::Tool,
            Tag::Observation => TagKind::Environment,
        }
    }

    pub fn from_name(name: &str) -> Option<Tag> {
        Tag::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `<name>`
    pub fn open(self) -> String {
        format!("<{}>", self.name())
    }

    /// `</name>`
    pub fn close(self) -> String {
        format!("</{}>", self.name())
    }

    pub fn is_tool(self) -> bool {
        self.kind() == TagKind::Tool
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for tag in Tag::ALL {
            assert_eq!(Tag::from_name(tag.name()), Some(tag));
            assert_eq!(tag.open(), format!("<{}>", tag.name()));
            assert_eq!(tag.close(), format!("</{}>", tag.name()));
        }
        assert_eq!(Tag::from_name("Think"), None);
    }

    #[test]
    fn serde_uses_the_tag_names() {
        for tag in Tag::ALL {
            let json = serde_json::to_string(&tag).unwrap();
            assert_eq!(json, format!("\"{}\"", tag.name()));
        }
    }
}
