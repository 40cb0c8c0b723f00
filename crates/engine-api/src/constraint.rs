//! Constrained decoding's contract: a grammar the next generation must follow, from its first
//! token or from a trigger on (docs/ARCHITECTURE.md, "Constrained decoding").

use serde::{Deserialize, Serialize};

/// A grammar in llguidance's Lark dialect (JSON schemas embedded with `%json { ... }`), and when
/// it starts to apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraint {
    /// The grammar the constrained text must match, to its end.
    pub grammar: String,
    /// `None`: every token of the generation is constrained. `Some(t)`: the model writes freely
    /// until its text contains `t`; the text after `t` must then match the grammar (a lazy
    /// grammar: an answer in prose stays prose, a tool call is held to its schema).
    pub trigger: Option<String>,
}

impl Constraint {
    /// A grammar in force from the first token.
    pub fn strict(grammar: impl Into<String>) -> Self {
        Constraint {
            grammar: grammar.into(),
            trigger: None,
        }
    }

    /// A grammar in force after `trigger`.
    pub fn after(trigger: impl Into<String>, grammar: impl Into<String>) -> Self {
        Constraint {
            grammar: grammar.into(),
            trigger: Some(trigger.into()),
        }
    }
}
