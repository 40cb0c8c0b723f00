//! Printing a run: each agent block distinct (colour where the terminal has it) as it streams,
//! or JSON lines for programs.

use anstyle::{AnsiColor, Style};
use catena_agent::{AgentEvent, RunSummary, Source, StopReason};
use catena_distill::RoleTokens;
use catena_distill::mas::Usage;
use catena_eval::vote::output_over_answer;
use catena_protocol::Tag;
use std::io::Write;

/// Where a run's events go.
pub trait EventSink {
    fn event(&mut self, event: &AgentEvent);
    fn summary(&mut self, summary: &RunSummary);
    /// The end of an explicit multi-agent run: the same summary, what its model calls cost, and
    /// each agent's share.
    fn multi_agent_summary(&mut self, summary: &RunSummary, usage: &Usage, by_role: &[RoleTokens]);
}

/// One JSON object per event, one per line; a `summary` object last.
pub struct JsonPrinter {
    out: std::io::Stdout,
}

impl JsonPrinter {
    pub fn new() -> Self {
        JsonPrinter {
            out: std::io::stdout(),
        }
    }

    fn line(&mut self, value: &serde_json::Value) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }
}

impl EventSink for JsonPrinter {
    fn event(&mut self, event: &AgentEvent) {
        if let Ok(value) = serde_json::to_value(event) {
            self.line(&value);
        }
    }

    fn summary(&mut self, summary: &RunSummary) {
        if let Ok(serde_json::Value::Object(mut fields)) = serde_json::to_value(summary) {
            let mut object = serde_json::Map::new();
            object.insert("type".into(), "summary".into());
            object.append(&mut fields);
            self.line(&serde_json::Value::Object(object));
        }
    }

    fn multi_agent_summary(&mut self, summary: &RunSummary, usage: &Usage, by_role: &[RoleTokens]) {
        if let Ok(serde_json::Value::Object(mut fields)) = serde_json::to_value(summary) {
            let mut object = serde_json::Map::new();
            object.insert("type".into(), "summary".into());
            object.insert("mode".into(), "mas".into());
            object.insert(
                "usage".into(),
                serde_json::to_value(usage).unwrap_or_default(),
            );
            object.insert(
                "by_role".into(),
                serde_json::to_value(by_role).unwrap_or_default(),
            );
            object.append(&mut fields);
            self.line(&serde_json::Value::Object(object));
        }
    }
}

/// The chain for people: a coloured heading per block, the text as it streams.
pub struct HumanPrinter {
    out: anstream::AutoStream<std::io::Stdout>,
    err: anstream::AutoStream<std::io::Stderr>,
    at_line_start: bool,
    /// Skip the newline that usually follows an opening tag.
    skip_newline: bool,
    style: Style,
    /// Whitespace the model wrote outside blocks, held until text follows it: the blank lines
    /// between two blocks are not shown, the spaces and newlines inside free text are.
    held_whitespace: String,
    /// Free text has been shown since the last block.
    in_free_text: bool,
}

impl HumanPrinter {
    pub fn new() -> Self {
        HumanPrinter {
            out: anstream::stdout(),
            err: anstream::stderr(),
            at_line_start: true,
            skip_newline: false,
            style: Style::new(),
            held_whitespace: String::new(),
            in_free_text: false,
        }
    }

    fn heading(&mut self, label: &str, style: Style) {
        if !self.at_line_start {
            let _ = writeln!(self.out);
        }
        let bold = style.bold();
        let _ = writeln!(self.out, "{bold}▍{label}{bold:#}");
        self.at_line_start = true;
    }

    fn text(&mut self, text: &str) {
        let mut text = text;
        if self.skip_newline {
            if let Some(rest) = text.strip_prefix('\n') {
                text = rest;
            }
            if !text.is_empty() {
                self.skip_newline = false;
            }
        }
        if text.is_empty() {
            return;
        }
        let style = self.style;
        let _ = write!(self.out, "{style}{text}{style:#}");
        let _ = self.out.flush();
        self.at_line_start = text.ends_with('\n');
    }

    fn end_line(&mut self) {
        if !self.at_line_start {
            let _ = writeln!(self.out);
            self.at_line_start = true;
        }
        let _ = self.out.flush();
    }
}

fn color(c: AnsiColor) -> Style {
    Style::new().fg_color(Some(c.into()))
}

fn tag_style(tag: Tag) -> Style {
    match tag {
        Tag::Plan => color(AnsiColor::Blue),
        Tag::Think => Style::new().dimmed(),
        Tag::Reflection => color(AnsiColor::Magenta),
        Tag::SuggestedAnswer | Tag::DoubleCheck => color(AnsiColor::Yellow),
        Tag::Answer => color(AnsiColor::Green),
        Tag::Observation => color(AnsiColor::BrightBlack),
        Tag::Code
        | Tag::WebSearch
        | Tag::CrawlPage
        | Tag::WikiSearch
        | Tag::VisualInspector
        | Tag::ToolCall => color(AnsiColor::Cyan),
    }
}

impl EventSink for HumanPrinter {
    fn event(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::RunStarted {
                profile,
                model,
                prompt_tokens,
                seed,
                temperature,
                ..
            } => {
                let dim = Style::new().dimmed();
                let _ = writeln!(
                    self.err,
                    "{dim}catena · {model} · profile {profile} · prompt {prompt_tokens} tokens · temperature {temperature} · seed {seed}{dim:#}"
                );
            }
            AgentEvent::BlockStarted { tag, source } => {
                let label = match source {
                    Source::Prefill => format!("{tag} (prefill)"),
                    Source::Runtime => format!("{tag} (catena)"),
                    Source::Model => tag.to_string(),
                };
                self.held_whitespace.clear();
                self.in_free_text = false;
                self.heading(&label, tag_style(*tag));
                self.style = tag_style(*tag);
                self.skip_newline = true;
            }
            AgentEvent::BlockDelta { text, .. } => self.text(text),
            AgentEvent::BlockEnded { .. } => {
                self.end_line();
                self.style = Style::new();
            }
            AgentEvent::Text { text, .. } => {
                if text.trim().is_empty() {
                    self.held_whitespace.push_str(text);
                } else {
                    let held = std::mem::take(&mut self.held_whitespace);
                    self.style = Style::new().dimmed();
                    if self.in_free_text {
                        self.text(&(held + text));
                    } else {
                        // A stretch of free text starts after the block before it.
                        self.text(text.trim_start());
                        self.in_free_text = true;
                    }
                    self.style = Style::new();
                }
            }
            AgentEvent::ParseIssue { message, .. } => {
                self.end_line();
                let yellow = color(AnsiColor::Yellow);
                let _ = writeln!(self.err, "{yellow}warning: {message}{yellow:#}");
            }
            AgentEvent::ToolCall { .. } => {}
            AgentEvent::AnswerAsked { reason } => {
                self.end_line();
                let dim = Style::new().dimmed();
                let _ = writeln!(
                    self.err,
                    "{dim}cut short ({reason}): the block is closed and the model asked for its \
                     answer{dim:#}"
                );
            }
            // `catena run` asks on the terminal itself (mcp_servers.rs); served runs ask the UI.
            AgentEvent::ApprovalRequested { .. } | AgentEvent::ApprovalAnswered { .. } => {}
            AgentEvent::Observation {
                tool,
                text,
                success,
                duplicate,
                elapsed_ms,
                ..
            } => {
                let style = if *success {
                    color(AnsiColor::Green)
                } else {
                    color(AnsiColor::Red)
                };
                let note = if *duplicate { ", repeated call" } else { "" };
                self.heading(
                    &format!("observation · {tool} · {:.0} ms{note}", elapsed_ms),
                    style,
                );
                self.style = tag_style(Tag::Observation);
                self.text(text);
                self.end_line();
                self.style = Style::new();
            }
        }
    }

    fn summary(&mut self, s: &RunSummary) {
        self.answer(s);
        let dim = Style::new().dimmed();
        if s.stop_reason == StopReason::Repetition {
            let _ = writeln!(
                self.err,
                "stopped: the model was writing the same text over and over (or making the same \
                 tool call with the same result); a sampled run with another --seed, or \
                 --samples N, draws other chains"
            );
        }
        let t = &s.timings;
        // A chat turn (`--mode chat`) reports no split of its time into reading and decoding.
        let rates = if t.decode_ms > 0.0 {
            format!(
                " · prefill {:.0} tok/s · decode {:.1} tok/s",
                t.prefill_tokens_per_s, t.decode_tokens_per_s
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            self.err,
            "{dim}stop: {} · {} tool calls · context {} tokens ({} evaluated, {} generated){rates} · {:.1} s{dim:#}",
            s.stop_reason,
            s.tool_calls,
            s.context_tokens,
            s.evaluated_tokens,
            s.generated_tokens,
            t.total_ms / 1e3
        );
    }

    fn multi_agent_summary(&mut self, s: &RunSummary, usage: &Usage, by_role: &[RoleTokens]) {
        self.answer(s);
        let dim = Style::new().dimmed();
        let _ = writeln!(
            self.err,
            "{dim}stop: {} · {} model calls · {} tokens ({} prompt, {} of them cached; {} completion) · {} tool calls · {:.1} s{dim:#}",
            s.stop_reason,
            usage.calls,
            usage.total(),
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            s.tool_calls,
            s.timings.total_ms / 1e3
        );
        let shares: Vec<String> = by_role
            .iter()
            .map(|r| {
                format!(
                    "{} {}×, {}+{}",
                    r.role.name(),
                    r.calls,
                    r.prompt_tokens,
                    r.completion_tokens
                )
            })
            .collect();
        let _ = writeln!(
            self.err,
            "{dim}by agent (calls, prompt+completion tokens): {}{dim:#}",
            shares.join(" · ")
        );
    }
}

impl HumanPrinter {
    fn answer(&mut self, s: &RunSummary) {
        self.end_line();
        let green = color(AnsiColor::Green).bold();
        match &s.answer {
            Some(answer) => {
                let _ = writeln!(self.out, "\n{green}Answer:{green:#} {answer}");
            }
            None => {
                let _ = writeln!(self.out, "\n(no answer)");
            }
        }
        // The small model often answers a guess it wrote before its program ran.
        if let Some(number) = output_over_answer(s.answer.as_deref(), &s.printed) {
            let yellow = color(AnsiColor::Yellow);
            let what = if s.answer.is_some() {
                "no program of this chain printed its answer"
            } else {
                "the chain gave no answer"
            };
            let _ = writeln!(
                self.err,
                "{yellow}note: {what}; its last program printed {number} (a vote, --samples N, \
                 counts a chain like this for that){yellow:#}"
            );
        }
    }
}
