//! The streaming trajectory parser.
//!
//! Text arrives as the model writes it, a token at a time, so a tag can be split across any
//! number of chunks. The parser holds back only the few characters that might still become a tag
//! or a code-fence marker and emits everything else at once, so a UI sees each block grow live.
//!
//! Rules (PROTOCOL.md §1, and what a runtime must survive when a model breaks them):
//! - Only the protocol's own tags, written exactly (`<think>`, `</think>`), are structural; any
//!   other `<...>` is text.
//! - Blocks do not nest. An opening tag inside an open block ends that block (reported as
//!   [`ParseIssue::NestedTag`]); a closing tag for another block ends the open one
//!   ([`ParseIssue::MismatchedClose`]); a closing tag with nothing open is text
//!   ([`ParseIssue::StrayClose`]).
//! - Inside a Markdown code fence, tags are code. The one way out of an unterminated fence is the
//!   tag the structure expects at the start of a line (the open block's closing tag, or any
//!   opening tag outside blocks), reported as [`ParseIssue::UnclosedFence`]. So
//!   `print("</code>")` stays code, and a model that forgot its closing fence still ends its
//!   block.
//! - An `<observation>` block is opaque: only `</observation>` ends it, since it holds whatever a
//!   program printed.
//! - Nothing panics, whatever the input.

use super::tag::Tag;
use serde::{Deserialize, Serialize};

/// A finished block of a trajectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub tag: Tag,
    /// The raw text between the tags.
    pub content: String,
    /// Whether the block ended with its own closing tag.
    pub closed: bool,
}

/// Something the model wrote that breaks the protocol; the parser recovers and reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ParseIssue {
    /// An opening tag while another block was open; the open block was ended there.
    NestedTag { open: Tag, found: Tag },
    /// A closing tag for a block other than the open one; the open block was ended there.
    MismatchedClose { open: Tag, found: Tag },
    /// A closing tag with no block open; kept as text.
    StrayClose { found: Tag },
    /// The text ended inside a block.
    Unclosed { open: Tag },
    /// A code fence was still open when a structural tag ended it.
    UnclosedFence { open: Option<Tag> },
}

impl std::fmt::Display for ParseIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseIssue::NestedTag { open, found } => {
                write!(
                    f,
                    "<{found}> opened inside <{open}>; <{open}> was ended there"
                )
            }
            ParseIssue::MismatchedClose { open, found } => {
                write!(f, "</{found}> closed <{open}>")
            }
            ParseIssue::StrayClose { found } => write!(f, "</{found}> with no open block"),
            ParseIssue::Unclosed { open } => write!(f, "<{open}> was never closed"),
            ParseIssue::UnclosedFence { open: Some(tag) } => {
                write!(f, "a code fence inside <{tag}> was never closed")
            }
            ParseIssue::UnclosedFence { open: None } => write!(f, "a code fence was never closed"),
        }
    }
}

/// What the parser found, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseEvent {
    /// Text outside any block (usually the whitespace between blocks).
    Text(String),
    BlockStart(Tag),
    BlockDelta {
        tag: Tag,
        text: String,
    },
    BlockEnd(Block),
    Issue(ParseIssue),
}

/// Longest run of backticks the parser waits for before deciding what a fence marker is.
const MAX_FENCE_RUN: usize = 64;

/// Incremental parser; feed it with [`Parser::push`], end it with [`Parser::finish`].
#[derive(Debug, Default)]
pub struct Parser {
    /// Input not yet decided (a possible tag or fence marker at its start).
    held: String,
    open: Option<(Tag, String)>,
    /// Backtick count of the open code fence.
    fence: Option<usize>,
    /// Only whitespace since the last newline.
    line_blank: bool,
    /// Decided text not yet emitted.
    text: String,
    events: Vec<ParseEvent>,
}

enum TagMatch {
    /// A whole tag of `len` bytes.
    Full {
        tag: Tag,
        closing: bool,
        len: usize,
    },
    /// The input ends inside what may still become a tag.
    Partial,
    No,
}

impl Parser {
    pub fn new() -> Self {
        Parser {
            line_blank: true,
            ..Default::default()
        }
    }

    /// The block open right now, if any.
    pub fn open_block(&self) -> Option<Tag> {
        self.open.as_ref().map(|(tag, _)| *tag)
    }

    /// Whether a code fence is open right now.
    pub fn in_fence(&self) -> bool {
        self.fence.is_some()
    }

    /// Feed the next piece of text.
    pub fn push(&mut self, chunk: &str) -> Vec<ParseEvent> {
        self.held.push_str(chunk);
        self.scan(false);
        self.flush_text();
        std::mem::take(&mut self.events)
    }

    /// Text that was written around the parser (the runtime's observations): it is not parsed,
    /// but the parser's idea of the current line follows it.
    pub fn skip_external(&mut self, text: &str) {
        if let Some(last) = text.chars().last() {
            self.line_blank = last == '\n' || (self.line_blank && text.trim().is_empty());
        }
    }

    /// End of input: decide what was held back and close what is open.
    pub fn finish(&mut self) -> Vec<ParseEvent> {
        self.scan(true);
        self.flush_text();
        if let Some((tag, _)) = &self.open {
            let tag = *tag;
            if self.fence.is_some() {
                self.events
                    .push(ParseEvent::Issue(ParseIssue::UnclosedFence {
                        open: Some(tag),
                    }));
            }
            self.events
                .push(ParseEvent::Issue(ParseIssue::Unclosed { open: tag }));
            self.end_block(false);
        } else if self.fence.is_some() {
            self.events
                .push(ParseEvent::Issue(ParseIssue::UnclosedFence { open: None }));
        }
        self.fence = None;
        std::mem::take(&mut self.events)
    }

    fn scan(&mut self, at_end: bool) {
        let held = std::mem::take(&mut self.held);
        let mut i = 0;
        while i < held.len() {
            let rest = &held[i..];
            let Some(c) = rest.chars().next() else { break };
            if c == '<' {
                match match_tag(rest) {
                    TagMatch::Full { tag, closing, len } => {
                        if self.is_structural(tag, closing) {
                            self.on_tag(tag, closing, &rest[..len]);
                        } else {
                            self.emit_str(&rest[..len]);
                        }
                        i += len;
                        continue;
                    }
                    TagMatch::Partial if !at_end => break,
                    TagMatch::Partial | TagMatch::No => {}
                }
            } else if c == '`' && self.line_blank && !self.in_observation() {
                let run = rest.bytes().take_while(|b| *b == b'`').count();
                if run == rest.len() && run < MAX_FENCE_RUN && !at_end {
                    break;
                }
                let run = run.min(MAX_FENCE_RUN);
                if run >= 3 {
                    self.on_fence_marker(run);
                }
                self.emit_str(&rest[..run]);
                i += run;
                continue;
            }
            self.emit_char(c);
            i += c.len_utf8();
        }
        self.held = held[i..].to_string();
    }

    fn in_observation(&self) -> bool {
        self.open_block() == Some(Tag::Observation)
    }

    /// Whether a complete tag at this point is structure rather than text.
    fn is_structural(&self, tag: Tag, closing: bool) -> bool {
        match self.open_block() {
            Some(Tag::Observation) => closing && tag == Tag::Observation,
            Some(open) if self.fence.is_some() => self.line_blank && closing && tag == open,
            None if self.fence.is_some() => self.line_blank && !closing,
            _ => true,
        }
    }

    fn on_fence_marker(&mut self, run: usize) {
        match self.fence {
            None => self.fence = Some(run),
            Some(open) if run >= open => self.fence = None,
            Some(_) => {}
        }
    }

    fn on_tag(&mut self, tag: Tag, closing: bool, raw: &str) {
        if self.fence.take().is_some() {
            let open = self.open_block();
            self.flush_text();
            self.events
                .push(ParseEvent::Issue(ParseIssue::UnclosedFence { open }));
        }
        match (self.open_block(), closing) {
            (None, false) => self.start_block(tag),
            (Some(open), false) => {
                self.flush_text();
                self.events.push(ParseEvent::Issue(ParseIssue::NestedTag {
                    open,
                    found: tag,
                }));
                self.end_block(false);
                self.start_block(tag);
            }
            (Some(open), true) if open == tag => {
                self.flush_text();
                self.end_block(true);
            }
            (Some(open), true) => {
                self.flush_text();
                self.events
                    .push(ParseEvent::Issue(ParseIssue::MismatchedClose {
                        open,
                        found: tag,
                    }));
                self.end_block(false);
            }
            (None, true) => {
                self.flush_text();
                self.events
                    .push(ParseEvent::Issue(ParseIssue::StrayClose { found: tag }));
                self.emit_str(raw);
                return;
            }
        }
        // A block's first line starts right after its opening tag: the grammar lets a fence open
        // there (`<code>```py`), and the parser must read what the grammar allows.
        self.line_blank = !closing;
    }

    fn start_block(&mut self, tag: Tag) {
        self.flush_text();
        self.open = Some((tag, String::new()));
        self.fence = None;
        self.events.push(ParseEvent::BlockStart(tag));
    }

    fn end_block(&mut self, closed: bool) {
        self.flush_text();
        self.fence = None;
        if let Some((tag, content)) = self.open.take() {
            self.events.push(ParseEvent::BlockEnd(Block {
                tag,
                content,
                closed,
            }));
        }
    }

    fn emit_char(&mut self, c: char) {
        self.text.push(c);
        if let Some((_, content)) = &mut self.open {
            content.push(c);
        }
        if c == '\n' {
            self.line_blank = true;
        } else if !c.is_whitespace() {
            self.line_blank = false;
        }
    }

    fn emit_str(&mut self, s: &str) {
        for c in s.chars() {
            self.emit_char(c);
        }
    }

    fn flush_text(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text);
        self.events.push(match self.open_block() {
            Some(tag) => ParseEvent::BlockDelta { tag, text },
            None => ParseEvent::Text(text),
        });
    }
}

/// Is `rest` (which starts with `<`) a protocol tag, the start of one, or neither?
fn match_tag(rest: &str) -> TagMatch {
    let body = &rest[1..];
    let (closing, name_part) = match body.strip_prefix('/') {
        Some(after) => (true, after),
        None => (false, body),
    };
    if name_part.is_empty() {
        return TagMatch::Partial;
    }
    let name_len = name_part
        .bytes()
        .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
        .count();
    let name = &name_part[..name_len];
    if name_len == name_part.len() {
        // The input ends inside the name.
        return if Tag::ALL.iter().any(|t| t.name().starts_with(name)) {
            TagMatch::Partial
        } else {
            TagMatch::No
        };
    }
    if name_part.as_bytes()[name_len] != b'>' {
        return TagMatch::No;
    }
    match Tag::from_name(name) {
        Some(tag) => TagMatch::Full {
            tag,
            closing,
            len: 1 + usize::from(closing) + name_len + 1,
        },
        None => TagMatch::No,
    }
}

/// Parse a whole text at once: the blocks and the issues, in order.
pub fn parse_all(text: &str) -> (Vec<Block>, Vec<ParseIssue>) {
    let mut parser = Parser::new();
    let mut events = parser.push(text);
    events.extend(parser.finish());
    let mut blocks = Vec::new();
    let mut issues = Vec::new();
    for event in events {
        match event {
            ParseEvent::BlockEnd(block) => blocks.push(block),
            ParseEvent::Issue(issue) => issues.push(issue),
            _ => {}
        }
    }
    (blocks, issues)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(text: &str) -> Vec<(Tag, String, bool)> {
        parse_all(text)
            .0
            .into_iter()
            .map(|b| (b.tag, b.content, b.closed))
            .collect()
    }

    fn issues(text: &str) -> Vec<ParseIssue> {
        parse_all(text).1
    }

    /// Feeds `text` one character at a time and returns every event.
    fn events_by_char(text: &str) -> Vec<ParseEvent> {
        let mut parser = Parser::new();
        let mut events = Vec::new();
        for c in text.chars() {
            events.extend(parser.push(&c.to_string()));
        }
        events.extend(parser.finish());
        events
    }

    #[test]
    fn parses_a_plain_trajectory() {
        let text = "<plan>1. compute</plan>\n<think>use code</think>\n<code>\n```py\nprint(1)\n```\n</code>";
        assert_eq!(
            blocks(text),
            vec![
                (Tag::Plan, "1. compute".into(), true),
                (Tag::Think, "use code".into(), true),
                (Tag::Code, "\n```py\nprint(1)\n```\n".into(), true),
            ]
        );
        assert!(issues(text).is_empty());
    }

    #[test]
    fn tags_split_across_chunks_are_found() {
        let text = "<think>a</think><answer>\\boxed{2}</answer>";
        let events = events_by_char(text);
        let ends: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                ParseEvent::BlockEnd(b) => Some((b.tag, b.content.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            vec![
                (Tag::Think, "a".to_string()),
                (Tag::Answer, "\\boxed{2}".to_string())
            ]
        );
    }

    #[test]
    fn deltas_stream_before_the_block_ends() {
        let mut parser = Parser::new();
        assert_eq!(
            parser.push("<think>"),
            vec![ParseEvent::BlockStart(Tag::Think)]
        );
        assert_eq!(
            parser.push("hello <"),
            vec![ParseEvent::BlockDelta {
                tag: Tag::Think,
                text: "hello ".into()
            }]
        );
        assert_eq!(
            parser.push("b>"),
            vec![ParseEvent::BlockDelta {
                tag: Tag::Think,
                text: "<b>".into()
            }]
        );
    }

    #[test]
    fn tags_inside_a_fence_are_code() {
        let text = "<code>\n```py\nprint('<answer>x</answer>')\nprint(\"</code>\")\n```\n</code>";
        let got = blocks(text);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, Tag::Code);
        assert!(got[0].1.contains("print(\"</code>\")"));
        assert!(got[0].2);
        assert!(issues(text).is_empty());
    }

    #[test]
    fn an_unclosed_fence_ends_at_the_blocks_closing_tag_on_its_own_line() {
        let text = "<code>\n```py\nprint(1)\n</code>\n<think>next</think>";
        let got = blocks(text);
        assert_eq!(got[0], (Tag::Code, "\n```py\nprint(1)\n".into(), true));
        assert_eq!(got[1], (Tag::Think, "next".into(), true));
        assert_eq!(
            issues(text),
            vec![ParseIssue::UnclosedFence {
                open: Some(Tag::Code)
            }]
        );
    }

    #[test]
    fn mid_line_closing_tag_inside_a_fence_is_code() {
        let mut parser = Parser::new();
        parser.push("<code>\n```py\nprint(\"</code>");
        assert_eq!(parser.open_block(), Some(Tag::Code));
        assert!(parser.in_fence());
    }

    #[test]
    fn longer_fences_need_as_many_backticks_to_close() {
        // The three-backtick line inside does not close the four-backtick fence, so the
        // mid-line closing tag after it is still code.
        let text = "<answer>\n````md\n```py\nx\n```\nsee </answer>\n````\n</answer>";
        let got = blocks(text);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.contains("```py\nx\n```\nsee </answer>\n````"));
        assert!(got[0].2);
    }

    #[test]
    fn nested_tags_end_the_outer_block() {
        let text = "<plan>a<think>b</think>";
        assert_eq!(
            blocks(text),
            vec![
                (Tag::Plan, "a".into(), false),
                (Tag::Think, "b".into(), true)
            ]
        );
        assert_eq!(
            issues(text),
            vec![ParseIssue::NestedTag {
                open: Tag::Plan,
                found: Tag::Think
            }]
        );
    }

    #[test]
    fn stray_and_mismatched_closes_are_reported() {
        let text = "</think>x<plan>p</think>";
        let (got, found) = parse_all(text);
        assert_eq!(
            got,
            vec![Block {
                tag: Tag::Plan,
                content: "p".into(),
                closed: false
            }]
        );
        assert_eq!(
            found,
            vec![
                ParseIssue::StrayClose { found: Tag::Think },
                ParseIssue::MismatchedClose {
                    open: Tag::Plan,
                    found: Tag::Think
                }
            ]
        );
    }

    #[test]
    fn unclosed_blocks_end_at_finish() {
        let text = "<answer>42";
        assert_eq!(blocks(text), vec![(Tag::Answer, "42".into(), false)]);
        assert_eq!(
            issues(text),
            vec![ParseIssue::Unclosed { open: Tag::Answer }]
        );
    }

    #[test]
    fn observations_are_opaque() {
        let text =
            "<observation>\n<answer>fake</answer>\n```\n</observation>\n\n<answer>1</answer>";
        let got = blocks(text);
        assert_eq!(got[0].0, Tag::Observation);
        assert!(got[0].1.contains("<answer>fake</answer>"));
        assert_eq!(got[1], (Tag::Answer, "1".into(), true));
        assert!(issues(text).is_empty());
    }

    #[test]
    fn unknown_and_malformed_tags_are_text() {
        let text = "<thinking>x</thinking><Think>y</Think><think >z<";
        assert!(blocks(text).is_empty());
        let mut parser = Parser::new();
        let mut events = parser.push(text);
        events.extend(parser.finish());
        let all: String = events
            .iter()
            .map(|e| match e {
                ParseEvent::Text(t) => t.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(all, text);
    }

    #[test]
    fn every_character_comes_out_exactly_once() {
        let text = "pre <plan>p</plan>\n\n<code>\n```py\nprint('<think>')\n```\n</code>\n<observation>\nout\n</observation>\n\n tail <";
        let events = events_by_char(text);
        let mut out = String::new();
        for e in &events {
            match e {
                ParseEvent::Text(t) => out.push_str(t),
                ParseEvent::BlockStart(tag) => out.push_str(&tag.open()),
                ParseEvent::BlockDelta { text, .. } => out.push_str(text),
                ParseEvent::BlockEnd(b) if b.closed => out.push_str(&b.tag.close()),
                _ => {}
            }
        }
        assert_eq!(out, text);
    }

    #[test]
    fn skip_external_keeps_line_state() {
        let mut parser = Parser::new();
        parser.push("<code>\n```py\nx\n```\n</code>");
        parser.skip_external("\n<observation>\nok\n</observation>\n\n");
        let events = parser.push("```\n<think>t</think>");
        // The backticks start a line, so they open a fence at top level, and the opening tag at
        // the start of the next line ends it.
        assert!(events.contains(&ParseEvent::Issue(ParseIssue::UnclosedFence { open: None })));
    }
}
