//! Training data: conversations read from disk, checked against the protocol, and turned into
//! token ids with a loss mask.
//!
//! Inputs (PROTOCOL.md §5): our JSONL (`catena sessions export --format sft`: one
//! `{"messages": [...]}` per line) and the AFM release's alpaca JSON (`[{"instruction", "input",
//! "output"}]`, or the same objects one per line). A sample that breaks the protocol is reported
//! with its line and reason and left out; nothing malformed is trained on.
//!
//! Tokens come from llama.cpp's own tokenizer for the same GGUF, split the way the runtime
//! builds its context: the chat template's markers are special tokens, message text is plain,
//! and every observation is tokenised on its own, as the runtime appends it after a tool call.
//! Loss mask (PROTOCOL.md §6): the prompt and every observation (from the newline before
//! `<observation>` to the two newlines after `</observation>`) carry no loss; the rest of the
//! assistant turn, tags and the end-of-turn token included, does.

use crate::{Result, TrainError};
use catena_engine::llama::LlamaEngine;
use catena_engine_api::ChatMessage;
use catena_engine_api::PromptPart;
use catena_protocol::parse_all;
use serde::Deserialize;
use std::path::Path;

/// One training conversation: an optional system message, one user turn, one assistant turn
/// holding the whole trajectory with its observations inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// Where it came from, for messages: `file.jsonl:12`.
    pub origin: String,
    pub system: Option<String>,
    pub user: String,
    pub assistant: String,
}

pub use catena_train_events::Rejected;

/// What a data file held.
#[derive(Debug, Default)]
pub struct Dataset {
    pub samples: Vec<Conversation>,
    pub rejected: Vec<Rejected>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Record {
    Chat {
        messages: Vec<RecordMessage>,
    },
    Alpaca {
        instruction: String,
        #[serde(default)]
        input: String,
        output: String,
    },
}

#[derive(Deserialize)]
struct RecordMessage {
    role: String,
    content: String,
}

/// Reads a data file in either format (a JSON array, or one JSON object per line).
pub fn read_dataset(path: &Path) -> Result<Dataset> {
    let text = std::fs::read_to_string(path).map_err(TrainError::io(path))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let mut data = Dataset::default();
    if text.trim_start().starts_with('[') {
        let items: Vec<serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| TrainError::BadData {
                path: path.to_path_buf(),
                reason: format!("not a JSON array of samples: {e}"),
            })?;
        for (i, item) in items.into_iter().enumerate() {
            let origin = format!("{name}[{i}]");
            match serde_json::from_value::<Record>(item) {
                Ok(record) => data.push(origin, record),
                Err(e) => data.reject(origin, format!("not a sample: {e}")),
            }
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let origin = format!("{name}:{}", i + 1);
            match serde_json::from_str::<Record>(line) {
                Ok(record) => data.push(origin, record),
                Err(_) => data.reject(
                    origin,
                    "not a sample (expected {\"messages\": [...]} or {\"instruction\", \"output\"})"
                        .into(),
                ),
            }
        }
    }
    if data.samples.is_empty() && data.rejected.is_empty() {
        return Err(TrainError::BadData {
            path: path.to_path_buf(),
            reason: "it holds no samples".into(),
        });
    }
    Ok(data)
}

impl Dataset {
    fn reject(&mut self, origin: String, reason: String) {
        self.rejected.push(Rejected { origin, reason });
    }

    fn push(&mut self, origin: String, record: Record) {
        let conversation = match record {
            Record::Alpaca {
                instruction,
                input,
                output,
            } => Ok(Conversation {
                origin: origin.clone(),
                system: None,
                user: if input.is_empty() {
                    instruction
                } else {
                    format!("{instruction}\n\n{input}")
                },
                assistant: output,
            }),
            Record::Chat { messages } => conversation_of(origin.clone(), messages),
        };
        match conversation.and_then(|c| check_trajectory(&c.assistant).map(|()| c)) {
            Ok(c) => self.samples.push(c),
            Err(reason) => self.reject(origin, reason),
        }
    }
}

fn conversation_of(origin: String, messages: Vec<RecordMessage>) -> Result<Conversation, String> {
    let roles: Vec<String> = messages.iter().map(|m| m.role.clone()).collect();
    let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
    let mut it = messages.into_iter();
    let (system, user, assistant) = match roles.as_slice() {
        ["system", "user", "assistant"] => (it.next().map(|m| m.content), it.next(), it.next()),
        ["user", "assistant"] => (None, it.next(), it.next()),
        _ => {
            return Err(format!(
                "not one user turn and one assistant turn (roles: {})",
                roles.join(", ")
            ));
        }
    };
    match (user, assistant) {
        (Some(user), Some(assistant)) => Ok(Conversation {
            origin,
            system,
            user: user.content,
            assistant: assistant.content,
        }),
        _ => Err("missing a message".into()),
    }
}

/// The protocol checks of PROTOCOL.md §5: observations balanced, tags properly nested and
/// closed, something to learn.
pub(crate) fn check_trajectory(assistant: &str) -> Result<(), String> {
    if assistant.trim().is_empty() {
        return Err("the assistant turn is empty".into());
    }
    let opens = assistant.matches("<observation>").count();
    let closes = assistant.matches("</observation>").count();
    if opens != closes {
        return Err(format!("{opens} <observation> but {closes} </observation>"));
    }
    observation_spans(assistant)?;
    let (_, issues) = parse_all(assistant);
    if let Some(issue) = issues.first() {
        return Err(format!("tags mis-nested: {issue}"));
    }
    Ok(())
}

/// Byte ranges of the observations the runtime appended: from the newline before
/// `<observation>` (when present) to the two newlines after `</observation>` (when present).
pub fn observation_spans(text: &str) -> Result<Vec<std::ops::Range<usize>>, String> {
    const OPEN: &str = "<observation>";
    const CLOSE: &str = "</observation>";
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find(OPEN) {
        let open = from + found;
        let Some(close_at) = text[open..].find(CLOSE) else {
            return Err("an <observation> is never closed".into());
        };
        let inner = &text[open + OPEN.len()..open + close_at];
        if inner.contains(OPEN) {
            return Err("an <observation> opens inside another".into());
        }
        let start = if text[..open].ends_with('\n') {
            open - 1
        } else {
            open
        };
        let mut end = open + close_at + CLOSE.len();
        let tail = &text[end..];
        end += if tail.starts_with("\n\n") {
            2
        } else if tail.starts_with('\n') {
            1
        } else {
            0
        };
        spans.push(start..end);
        from = end;
    }
    if text[from..].contains(CLOSE) {
        return Err("an </observation> with no <observation>".into());
    }
    Ok(spans)
}

/// A tokenised sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub tokens: Vec<u32>,
    /// `trained[i]`: token `i` carries loss.
    pub trained: Vec<bool>,
}

impl Encoded {
    pub(crate) fn trained_tokens(&self) -> usize {
        self.trained.iter().filter(|&&t| t).count()
    }
}

/// The pieces of a conversation as the runtime's context holds them, each with whether it
/// is trained: prompt (chat template, not trained), then the trajectory cut at its
/// observations, then the end-of-turn marker (trained).
pub(crate) fn pieces(
    engine: &LlamaEngine,
    conversation: &Conversation,
) -> Result<Vec<(PromptPart, bool)>> {
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = &conversation.system {
        messages.push(ChatMessage::new("system", system));
    }
    messages.push(ChatMessage::new("user", &conversation.user));
    let mut out: Vec<(PromptPart, bool)> = engine
        .conversation_prompt(&messages)?
        .into_iter()
        .map(|p| (p, false))
        .collect();
    let text = &conversation.assistant;
    let spans = observation_spans(text).map_err(TrainError::Config)?;
    let mut at = 0;
    for span in spans {
        if span.start > at {
            out.push((PromptPart::plain(&text[at..span.start]), true));
        }
        out.push((PromptPart::plain(&text[span.clone()]), false));
        at = span.end;
    }
    if at < text.len() {
        out.push((PromptPart::plain(&text[at..]), true));
    }
    if let Some(end) = end_of_turn(engine) {
        out.push((PromptPart::special(end), true));
    }
    Ok(out)
}

/// The chat template's end-of-turn marker, trained so the model learns to stop.
fn end_of_turn(engine: &LlamaEngine) -> Option<&'static str> {
    match engine.info().chat_template {
        catena_engine_api::ChatFormat::ChatMl => Some("<|im_end|>"),
        _ => None,
    }
}

/// Tokens and loss mask of a conversation.
pub fn encode(engine: &LlamaEngine, conversation: &Conversation) -> Result<Encoded> {
    let mut tokens = Vec::new();
    let mut trained = Vec::new();
    if let Some(bos) = engine.bos_token() {
        tokens.push(bos as u32);
        trained.push(false);
    }
    for (part, train) in pieces(engine, conversation)? {
        for id in engine.tokenize(&part.text, part.special) {
            tokens.push(id as u32);
            trained.push(train);
        }
    }
    Ok(Encoded { tokens, trained })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observation_spans_take_the_runtime_framing() {
        let t = "<code>\n```py\nprint(1)\n```\n</code>\n<observation>\n1\n</observation>\n\n<answer>1</answer>";
        let spans = observation_spans(t).unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(
            &t[spans[0].clone()],
            "\n<observation>\n1\n</observation>\n\n"
        );
        assert!(observation_spans("a </observation> b").is_err());
        assert!(observation_spans("<observation> x").is_err());
        assert!(
            observation_spans("<observation><observation></observation></observation>").is_err()
        );
    }

    #[test]
    fn malformed_trajectories_are_refused_with_a_reason() {
        assert!(check_trajectory("<think>x</think><answer>1</answer>").is_ok());
        let unbalanced = check_trajectory("<code>x</code>\n<observation>\n1\n").unwrap_err();
        assert!(unbalanced.contains("1 <observation> but 0"), "{unbalanced}");
        let nested = check_trajectory("<think><plan>x</plan></think>").unwrap_err();
        assert!(nested.contains("mis-nested"), "{nested}");
        assert!(check_trajectory("  ").is_err());
    }

    #[test]
    fn both_formats_are_read_and_bad_lines_reported() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("d.jsonl");
        std::fs::write(
            &jsonl,
            concat!(
                r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"<answer>1</answer>"}]}"#,
                "\n",
                r#"{"instruction":"i","input":"","output":"<think>t</think><answer>2</answer>"}"#,
                "\n\nnot json\n",
                r#"{"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"again"}]}"#,
                "\n",
                r#"{"instruction":"i","output":"<code>x</code>\n<observation>\n1\n"}"#,
                "\n"
            ),
        )
        .unwrap();
        let data = read_dataset(&jsonl).unwrap();
        assert_eq!(data.samples.len(), 2);
        assert_eq!(data.samples[0].system.as_deref(), Some("s"));
        assert_eq!(data.samples[1].user, "i");
        let origins: Vec<&str> = data.rejected.iter().map(|r| r.origin.as_str()).collect();
        assert_eq!(origins, ["d.jsonl:4", "d.jsonl:5", "d.jsonl:6"]);
        assert!(data.rejected[1].reason.contains("one user turn"));

        let alpaca = dir.path().join("a.json");
        std::fs::write(
            &alpaca,
            r#"[{"instruction":"q","input":"extra","output":"<answer>3</answer>"},{"bad":1}]"#,
        )
        .unwrap();
        let data = read_dataset(&alpaca).unwrap();
        assert_eq!(data.samples[0].user, "q\n\nextra");
        assert_eq!(data.rejected[0].origin, "a.json[1]");
        std::fs::write(&alpaca, "").unwrap();
        assert!(read_dataset(&alpaca).is_err());
    }
}
