//! Generated text, as it comes, turned into OpenAI's streaming pieces: content, then each call's
//! id and name once and its arguments as fragments that add up to the whole.

use crate::FormatError;
use crate::format::{CallFormat, Parsed};
use crate::tools::{ToolCall, ToolSpec};

/// One piece of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallDelta {
    Content(String),
    /// A call starts (sent once): its place among the calls, its id and function name.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of a call's arguments.
    Arguments {
        index: usize,
        fragment: String,
    },
}

/// Splits a generation into [`CallDelta`]s while it is written, and into content and calls at
/// its end. Each piece is sent only once it can no longer change.
pub struct CallStream {
    format: CallFormat,
    tools: Vec<ToolSpec>,
    text: String,
    content_sent: String,
    calls_sent: Vec<SentCall>,
}

/// A call as far as it has been sent.
struct SentCall {
    id: String,
    name: String,
    arguments: String,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// `None` when the answer is only calls.
    pub content: Option<String>,
    pub calls: Vec<ToolCall>,
}

impl CallStream {
    pub fn new(format: CallFormat, tools: Vec<ToolSpec>) -> CallStream {
        CallStream {
            format,
            tools,
            text: String::new(),
            content_sent: String::new(),
            calls_sent: Vec::new(),
        }
    }

    /// The pieces that `text`, the next part of the generation, settles.
    pub fn push(&mut self, text: &str) -> Vec<CallDelta> {
        self.text.push_str(text);
        let parsed = self.format.parse(&self.text, &self.tools, false);
        self.diff(&parsed)
    }

    /// The whole answer of a generation read at once, for a request that does not stream.
    pub fn read_whole(
        format: CallFormat,
        tools: Vec<ToolSpec>,
        text: &str,
    ) -> Result<Finished, FormatError> {
        let mut stream = CallStream::new(format, tools);
        stream.text = text.to_string();
        stream.finish().map(|(_, finished)| finished)
    }

    /// The last pieces and the whole answer. A call that does not parse, or names no offered
    /// tool, is an error (the text is in it); so is a finished answer that does not extend what
    /// was sent while it was written (a model's malformed text can look like a call's start and
    /// then not be one), since a client that adds up the pieces would hold another answer.
    pub fn finish(&mut self) -> Result<(Vec<CallDelta>, Finished), FormatError> {
        let (content, calls) = self.format.finish(&self.text, &self.tools)?;
        let parsed = Parsed {
            content,
            calls: calls
                .iter()
                .map(|(name, arguments)| crate::ParsedCall {
                    name: Some(name.clone()),
                    arguments: arguments.clone(),
                    complete: true,
                })
                .collect(),
        };
        let deltas = self.diff(&parsed);
        if !self.sent_all_of(&parsed) {
            return Err(FormatError::BadCall {
                reason: "what was streamed of it does not match the finished text".into(),
                text: self.text.clone(),
            });
        }
        let calls = calls
            .into_iter()
            .zip(&self.calls_sent)
            .map(|((name, arguments), sent)| ToolCall {
                id: sent.id.clone(),
                name,
                arguments,
            })
            .collect();
        let content = (!parsed.content.is_empty()).then_some(parsed.content);
        Ok((deltas, Finished { content, calls }))
    }

    /// The text generated so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the pieces sent add up to `parsed`, exactly.
    fn sent_all_of(&self, parsed: &Parsed) -> bool {
        self.content_sent == parsed.content
            && self.calls_sent.len() == parsed.calls.len()
            && self
                .calls_sent
                .iter()
                .zip(&parsed.calls)
                .all(|(sent, call)| {
                    call.name.as_ref() == Some(&sent.name) && call.arguments == sent.arguments
                })
    }

    fn diff(&mut self, parsed: &Parsed) -> Vec<CallDelta> {
        let mut deltas = Vec::new();
        if let Some(more) = parsed.content.strip_prefix(self.content_sent.as_str())
            && !more.is_empty()
        {
            deltas.push(CallDelta::Content(more.to_string()));
            self.content_sent = parsed.content.clone();
        }
        for (index, call) in parsed.calls.iter().enumerate() {
            if index == self.calls_sent.len() {
                // A call starts once its name is written and names an offered tool: text that
                // only looks like a call's start may still turn out to be prose.
                let offered = |name: &&String| self.tools.iter().any(|t| &t.name == *name);
                let Some(name) = call.name.as_ref().filter(offered) else {
                    break;
                };
                let id = self.format.call_id();
                deltas.push(CallDelta::CallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                self.calls_sent.push(SentCall {
                    id,
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            let Some(sent) = self.calls_sent.get_mut(index) else {
                break;
            };
            if let Some(more) = call.arguments.strip_prefix(sent.arguments.as_str())
                && !more.is_empty()
            {
                deltas.push(CallDelta::Arguments {
                    index,
                    fragment: more.to_string(),
                });
                sent.arguments = call.arguments.clone();
            }
        }
        deltas
    }
}

impl CallFormat {
    /// A new call id in the shape the family's template accepts (Mistral's are 9 letters and
    /// digits; the others take OpenAI's `call_...`).
    pub fn call_id(self) -> String {
        let hex = uuid::Uuid::now_v7().simple().to_string();
        match self {
            CallFormat::Mistral => hex[hex.len() - 9..].to_string(),
            _ => format!("call_{}", &hex[8..]),
        }
    }
}
