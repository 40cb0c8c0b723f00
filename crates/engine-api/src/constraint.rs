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
    /// Text already in the context that the constrained text begins with: a prefill, or the
    /// part of a chain's segment written before this generation. It is checked against the
    /// grammar before anything is sampled (a [`crate::EngineError::OutsideGrammar`] if it
    /// does not fit) and never sampled again. With a trigger, it is searched for the trigger
    /// like sampled text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub given: String,
}

impl Constraint {
    /// A grammar in force from the first token.
    pub fn strict(grammar: impl Into<String>) -> Self {
        Constraint {
            grammar: grammar.into(),
            trigger: None,
            given: String::new(),
        }
    }

    /// A grammar in force after `trigger`.
    pub fn after(trigger: impl Into<String>, grammar: impl Into<String>) -> Self {
        Constraint {
            grammar: grammar.into(),
            trigger: Some(trigger.into()),
            given: String::new(),
        }
    }

    /// The same constraint, continuing after `given` (see [`Constraint::given`]).
    pub fn continuing(mut self, given: impl Into<String>) -> Self {
        self.given = given.into();
        self
    }
}
