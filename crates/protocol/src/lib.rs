//! The Chain-of-Agents protocol (docs/PROTOCOL.md): tags, the streaming parser, the renderer,
//! answer extraction and the prompt profiles. It knows nothing of models, files or processes:
//! every other crate reads model text through it.

pub mod answer;
pub mod external;
pub mod fence;
pub mod grammar;
pub mod names;
pub mod observation;
pub mod parser;
pub mod profile;
pub mod render;
pub mod tag;
pub mod units;

pub use answer::{boxed, final_answer, last_suggested_answer};
pub use external::ExternalTool;
pub use grammar::{ChainGrammar, Segment};
pub use observation::printed_output;
pub use parser::{Block, ParseEvent, ParseIssue, Parser, parse_all};
pub use profile::{AnswerFormat, Profile, ProfileError};
pub use render::{render_block, render_blocks, render_observation};
pub use tag::{Tag, TagKind};

#[cfg(test)]
mod proptests;
