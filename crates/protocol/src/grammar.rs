//! The protocol as a grammar, for decoding that cannot leave it (PROTOCOL.md §8).
//!
//! A chain is generated in segments: from the start of the assistant turn, or from the end of
//! an observation, up to the closing tag of a tool call or of the answer (the stop strings of
//! §2). Each segment is held to a grammar in llguidance's Lark dialect, built here from the
//! profile alone (its tools, the role blocks its instructions name, its answer format and the
//! blocks it opens with), so a profile file of the user's own gets its own grammar:
//!
//! - only blocks, separated by white space: no free text, no tag inside a block, no block
//!   inside another;
//! - role blocks (`<think>`, `<plan>`, ...) hold prose: no code fence and no `<` but before a
//!   number or `=`, so a program cannot hide in a thought and a block can only end by closing;
//! - `<code>` holds exactly one ```` ```py ```` fenced program, optionally followed by a
//!   ```` ```sh ```` fence of standard input;
//! - the segment ends with one tool call or with the `<answer>`, whose content is what the
//!   profile's verifier reads: exactly one `\boxed{}` value (as the math profile asks), one
//!   fenced program, or a non-empty string;
//! - `<observation>` is never the model's to write; the runtime appends it between segments,
//!   unconstrained, and the next segment starts after it.

use crate::profile::{AnswerFormat, Profile};
use crate::tag::{Tag, TagKind};

/// Where in the chain a generation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// The start of the assistant turn, written by the model: the profile's opening blocks
    /// come first.
    Opening,
    /// After an observation or a prefill, with tool calls left in the budget.
    Resuming,
    /// After the last tool call the budget allows: only role blocks and the answer.
    AnswerOnly,
    /// The answer and nothing before it: the last word of a chain that a budget or the loop
    /// watch cut short (PROTOCOL.md §2, item 5).
    Answer,
}

/// The grammars of one profile's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainGrammar {
    opening: String,
    resuming: String,
    answer_only: String,
    answer: String,
}

impl ChainGrammar {
    pub fn for_profile(profile: &Profile) -> ChainGrammar {
        let terminals = terminals(profile);
        let roles = role_tags(profile);
        let tools = &profile.tools;
        let step = |with_tools: bool| {
            let role = alternatives(roles.iter().copied());
            let mut last = Vec::new();
            if with_tools {
                last.extend(tools.iter().copied());
            }
            last.push(Tag::Answer);
            let last = alternatives(last.into_iter());
            // Calls may come before the last block too: a generation stops at the first one
            // (its closing tag is a stop string), but a prefill may hold several (§2).
            let between = match (role, with_tools) {
                (Some(role), true) => alternatives(tools.iter().copied())
                    .map(|t| format!("{role} | {t}"))
                    .or(Some(role)),
                (role, true) => alternatives(tools.iter().copied()).or(role),
                (role, false) => role,
            };
            match between {
                Some(between) => format!("({between})* ({last})", last = last.unwrap_or_default()),
                None => last.unwrap_or_default(),
            }
        };
        let opening: Vec<String> = profile.opens_with.iter().map(|t| terminal(*t)).collect();
        let build = |start: String| format!("{HEADER}start: {start}\n{terminals}");
        ChainGrammar {
            opening: build(format!("{} {}", opening.join(" "), step(true))),
            resuming: build(step(true)),
            answer_only: build(step(false)),
            answer: build(terminal(Tag::Answer)),
        }
    }

    /// The grammar a generation starting at `segment` must follow.
    pub fn segment(&self, segment: Segment) -> &str {
        match segment {
            Segment::Opening => &self.opening,
            Segment::Resuming => &self.resuming,
            Segment::AnswerOnly => &self.answer_only,
            Segment::Answer => &self.answer,
        }
    }
}

const HEADER: &str = "// A Chain-of-Agents segment (PROTOCOL.md §8).\n";

/// The role blocks a profile uses: those its instructions name (`<think>` written in the user
/// template), so a profile that never mentions `<double_check>` does not get one.
fn role_tags(profile: &Profile) -> Vec<Tag> {
    Tag::ALL
        .into_iter()
        .filter(|t| t.kind() == TagKind::Role && profile.user_template.contains(&t.open()))
        .collect()
}

/// `A | B | C` over the blocks' terminals.
fn alternatives(tags: impl Iterator<Item = Tag>) -> Option<String> {
    let names: Vec<String> = tags.map(terminal).collect();
    (!names.is_empty()).then(|| names.join(" | "))
}

/// The terminal (one lexeme) that matches a whole block of `tag`.
fn terminal(tag: Tag) -> String {
    tag.name().to_ascii_uppercase()
}

/// Every block as one terminal, and the texts they are made of.
fn terminals(profile: &Profile) -> String {
    let names: Vec<&str> = Tag::ALL.iter().map(|t| t.name()).collect();
    let any_tag = format!("<\\/?({})>", names.join("|"));
    let mut out = String::new();
    // Text without a protocol tag (programs, their input, a call's JSON). Prose also without a
    // code fence, and without `<` except before a number or `=` (`n < 10`, `<=`): a block cannot
    // be closed half-way (`</answer` without its `>`), and a model that wants to open a block
    // inside another (`< code>`, `<code>`) is left only the closing tag.
    out.push_str(&format!("TEXT: /(?s:.*)/ & ~/(?s:.*{any_tag}.*)/\n"));
    out.push_str("PROSE: /(?s:.*)/ & ~/(?s:.*(<([^0-9= ]| [^0-9])|```).*)/ & ~/(?s:.*<)/\n");
    out.push_str("FILLED_PROSE: PROSE & /(?s:.*\\S.*)/\n");
    out.push_str("FILLED_TEXT: TEXT & /(?s:.*\\S.*)/\n");
    out.push_str("PROGRAM: TEXT & ~/(?s:.*```.*)/\n");
    // White space between blocks and around fences, a little of it: unbounded, a small model
    // can fill its whole budget with it.
    out.push_str("WS: /[ \\t\\r\\n]{0,4}/\n");
    // A fence opens only at the start of a line (the parser's rule, PROTOCOL.md §1), so the stdin
    // fence needs a line break after the program's closing fence.
    out.push_str("LINE_BREAK: /[ \\t]{0,2}\\r?\\n[ \\t\\r\\n]{0,3}/\n");
    out.push_str("FENCED_PROGRAM: \"```\" /py|python/ \"\\n\" PROGRAM \"\\n```\"\n");
    // A boxed value: braces nest up to three deep (\frac{\sqrt{2}}{2}), no tag-like text.
    out.push_str("BOXED_VALUE: /([^{}<]|\\{([^{}<]|\\{([^{}<]|\\{[^{}<]*\\})*\\})*\\})*/\n");
    for tag in Tag::ALL {
        let body = match tag.kind() {
            TagKind::Role => "PROSE".to_string(),
            TagKind::Environment => continue,
            TagKind::Final => answer_body(profile.answer),
            TagKind::Tool if tag == Tag::Code => {
                "WS FENCED_PROGRAM (LINE_BREAK \"```sh\\n\" PROGRAM \"\\n```\")? WS".to_string()
            }
            TagKind::Tool if tag == Tag::ToolCall => "FILLED_TEXT".to_string(),
            TagKind::Tool => "FILLED_PROSE".to_string(),
        };
        out.push_str(&format!(
            "{}: WS \"{}\" {body} \"{}\"\n",
            terminal(tag),
            tag.open(),
            tag.close()
        ));
    }
    out
}

/// What an `<answer>` holds for the profile's verifier.
fn answer_body(format: AnswerFormat) -> String {
    match format {
        AnswerFormat::Boxed => "WS \"\\\\boxed{\" BOXED_VALUE \"}\" WS".to_string(),
        AnswerFormat::Program => "WS FENCED_PROGRAM WS".to_string(),
        AnswerFormat::Short | AnswerFormat::Multi => "FILLED_PROSE".to_string(),
    }
}

#[cfg(test)]
mod tests;
