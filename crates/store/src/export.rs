//! Exporting runs as training data.
//!
//! Two formats (PROTOCOL.md §5):
//! - `sft`: Catena's own JSONL, one trajectory per line, the format `catena train sft` reads:
//!   `{"id", "messages": [{"role": "system"|"user"|"assistant", "content"}...], "profile", "model",
//!   "answer", "feedback"}`. The assistant message holds the whole trajectory with its
//!   observations inline; the trainer masks the prompt and the observations.
//! - `alpaca`: the AFM release's JSON array of `{"instruction", "input": "", "output"}`, the
//!   instruction being the user message (task instructions and question). Only single-turn
//!   samples fit it; others are skipped and counted.

use super::{Feedback, RunKind, RunRecord, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;

/// Which export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Sft,
    Alpaca,
}

/// Which runs to export, by the user's feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackFilter {
    Any,
    Good,
    Bad,
    Rated,
    Unrated,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// One line of the `sft` export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SftRecord {
    pub id: String,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub answer: Option<String>,
    #[serde(default)]
    pub feedback: Option<Feedback>,
}

/// How an export went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExportStats {
    pub written: usize,
    /// Runs the format cannot hold (multi-turn chats in `alpaca`).
    pub skipped: usize,
}

#[derive(Serialize)]
struct AlpacaRecord<'a> {
    instruction: &'a str,
    input: &'a str,
    output: &'a str,
}

impl Store {
    /// Writes the finished runs matching `filter` to `out`, oldest first.
    ///
    /// One run is read at a time: a store of coding-agent chats holds every request's whole
    /// conversation, and reading all runs first took twice the export's size in memory (940 MB
    /// for a 440 MB export), with the store locked for as long as the reading took.
    pub fn export(
        &self,
        format: ExportFormat,
        filter: FeedbackFilter,
        out: &mut dyn Write,
    ) -> Result<ExportStats, StoreError> {
        let mut stats = ExportStats::default();
        if format == ExportFormat::Alpaca {
            out.write_all(b"[")?;
        }
        for id in self.finished_run_ids(filter)? {
            let run = match self.run(&id) {
                Ok(run) => run,
                // Deleted since the list was read.
                Err(StoreError::NoRun(_)) => continue,
                Err(e) => return Err(e),
            };
            match sft_record(&run) {
                Some(record) => write_record(format, &record, &mut stats, out)?,
                None => stats.skipped += 1,
            }
        }
        if format == ExportFormat::Alpaca {
            out.write_all(b"\n]\n")?;
        }
        Ok(stats)
    }
}

/// Writes one record in `format`, counting it as written or, where the format cannot hold it,
/// skipped.
fn write_record(
    format: ExportFormat,
    record: &SftRecord,
    stats: &mut ExportStats,
    out: &mut dyn Write,
) -> Result<(), StoreError> {
    match format {
        ExportFormat::Sft => {
            serde_json::to_writer(&mut *out, record).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
        }
        ExportFormat::Alpaca => {
            let (user, assistant) = match record.messages.as_slice() {
                [system, user, assistant]
                    if system.role == "system"
                        && user.role == "user"
                        && assistant.role == "assistant" =>
                {
                    (user, assistant)
                }
                [user, assistant] if user.role == "user" && assistant.role == "assistant" => {
                    (user, assistant)
                }
                _ => {
                    stats.skipped += 1;
                    return Ok(());
                }
            };
            if stats.written > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"\n")?;
            let item = AlpacaRecord {
                instruction: &user.content,
                input: "",
                output: &assistant.content,
            };
            serde_json::to_writer(&mut *out, &item).map_err(std::io::Error::other)?;
        }
    }
    stats.written += 1;
    Ok(())
}

/// The conversation of a finished run: its prompt and its trajectory (or, for a chat, the
/// request's messages and the reply).
fn sft_record(run: &RunRecord) -> Option<SftRecord> {
    let trajectory = run.trajectory.clone()?;
    let mut messages = match run.kind {
        RunKind::Agent => vec![
            Message {
                role: "system".into(),
                content: run.system_prompt.clone(),
            },
            Message {
                role: "user".into(),
                content: run.user_prompt.clone(),
            },
        ],
        RunKind::Chat => chat_messages(&run.options)?,
    };
    messages.push(Message {
        role: "assistant".into(),
        content: trajectory,
    });
    Some(SftRecord {
        id: run.id.clone(),
        messages,
        profile: run.profile.clone(),
        model: Some(run.model.clone()),
        answer: run.answer.clone(),
        feedback: run.feedback,
    })
}

/// The messages a chat run was asked with (kept in its options as `messages`).
fn chat_messages(options: &Value) -> Option<Vec<Message>> {
    serde_json::from_value(options.get("messages")?.clone()).ok()
}
