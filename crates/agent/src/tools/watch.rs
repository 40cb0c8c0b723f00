//! Tool calls that end when the run does. A tool may block on something the run does not
//! control (a page that sends one byte every two seconds held `--max-time 10` for a minute, and a
//! cancelled run of `catena serve` stayed `running` with its lane taken), so every call runs on a
//! thread of its own while the run's thread waits for the first of: its result, the run's
//! deadline, the run's cancel flag. A tool that can stop itself cleanly (the sandbox) reads the
//! same limits from [`CallContext::limits`] and stops at that moment too; one that cannot (a
//! blocking network read) is left behind, its result unread, and ends by itself at its own
//! deadline (the fetcher's).
//!
//! The run's model stays on the run's thread: a session is not shared between threads, and the
//! page summariser's calls are few and bounded, so a tool's model calls come back over a channel
//! and the run's thread answers them ([`ModelOnRunThread`]).

use super::{CallContext, Tool, ToolOutput};
use crate::summarize::{ChatError, ChatModel};
use catena_engine_api::CancelFlag;
use catena_protocol::Tag;
use catena_run_events::StopReason;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How often the run's thread looks at the cancel flag while a tool works (the flag is a plain
/// atomic, so it cannot wake the waiting thread).
const CANCEL_POLL: Duration = Duration::from_millis(25);

/// The run's limits as a tool call sees them.
#[derive(Debug, Clone, Default)]
pub struct CallLimits {
    /// When the run's time runs out.
    pub deadline: Option<Instant>,
    /// Set when the run is cancelled.
    pub cancel: Option<CancelFlag>,
}

/// Why a run stopped a tool call before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    Cancelled,
    OutOfTime,
}

impl CallLimits {
    /// Whether the run has been cancelled or its time has run out (cancellation first: it is
    /// what the user asked for).
    pub fn interruption(&self) -> Option<Interruption> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
        {
            return Some(Interruption::Cancelled);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(Interruption::OutOfTime);
        }
        None
    }

    /// Time left before the deadline; `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Resolves when the run is cancelled or out of time; never without a deadline or a flag.
    /// For a tool whose work is a future it can drop (the sandbox's program).
    pub async fn stopped(&self) -> Interruption {
        if self.deadline.is_none() && self.cancel.is_none() {
            return std::future::pending().await;
        }
        loop {
            if let Some(why) = self.interruption() {
                return why;
            }
            let wait = self
                .remaining()
                .map_or(CANCEL_POLL, |left| left.min(CANCEL_POLL));
            tokio::time::sleep(wait).await;
        }
    }
}

impl Interruption {
    /// How the run ends.
    pub fn stop_reason(self) -> StopReason {
        match self {
            Interruption::Cancelled => StopReason::Cancelled,
            Interruption::OutOfTime => StopReason::TimeBudget,
        }
    }

    /// Why, in the words observations use.
    pub fn reason(self) -> &'static str {
        match self {
            Interruption::Cancelled => "the run was cancelled",
            Interruption::OutOfTime => "the run's time ran out",
        }
    }

    /// The observation of a `tag` call stopped this way (PROTOCOL.md §3).
    pub fn observation(self, tag: Tag) -> String {
        format!(
            "The {tag} call was stopped before it finished: {}.",
            self.reason()
        )
    }
}

/// A watched call's end.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedCall {
    /// The tool's output, or the observation that says why it was stopped.
    pub output: ToolOutput,
    /// Set when the run's deadline or cancel flag ended the call.
    pub interrupted: Option<Interruption>,
}

/// What a tool's thread sends the run's thread.
enum FromTool {
    /// A model call for the run's thread to answer.
    Chat {
        instruction: String,
        max_tokens: usize,
        reply: Sender<Result<String, ChatError>>,
    },
    Done(ToolOutput),
}

/// The run's model as a tool's thread sees it: each call is sent to the run's thread, which
/// answers it with the model it holds.
struct ModelOnRunThread(Sender<FromTool>);

impl ChatModel for ModelOnRunThread {
    fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
        let gone = || ChatError::Failed("the run stopped waiting for this call".into());
        let (reply, answer) = mpsc::channel();
        self.0
            .send(FromTool::Chat {
                instruction: instruction.to_string(),
                max_tokens,
                reply,
            })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

/// Runs `tool` on `input` on a thread of its own with `context` (its model answered from this
/// thread) and waits for it within `context.limits`. The one way the chain runner and the
/// explicit agents call tools.
pub fn call_watched(tool: Arc<dyn Tool>, input: &str, context: CallContext<'_>) -> WatchedCall {
    let started = Instant::now();
    let tag = tool.tag();
    let limits = context.limits.clone();
    let mut model = context.model;
    let (to_run, from_tool) = mpsc::channel();
    let job = {
        let input = input.to_string();
        let last_think = context.last_think.map(str::to_string);
        let last_search = context.last_search.map(str::to_string);
        let has_model = model.is_some();
        let limits = limits.clone();
        let to_run = to_run.clone();
        move || {
            let mut proxy = ModelOnRunThread(to_run.clone());
            let mut context = CallContext {
                last_think: last_think.as_deref(),
                last_search: last_search.as_deref(),
                model: has_model.then_some(&mut proxy as &mut dyn ChatModel),
                limits,
            };
            let output = tool.call(&input, &mut context);
            // The run may have stopped waiting: then nobody reads this.
            let _ = to_run.send(FromTool::Done(output));
        }
    };
    let failed = |why: String| WatchedCall {
        output: ToolOutput {
            observation: format!("The {tag} tool failed: {why}."),
            success: false,
            elapsed: started.elapsed(),
        },
        interrupted: None,
    };
    if let Err(e) = std::thread::Builder::new()
        .name(format!("catena-tool-{tag}"))
        .spawn(job)
    {
        return failed(format!("it could not start ({e})"));
    }
    // Only the tool's thread holds a sender now: its end (or panic) disconnects the channel.
    drop(to_run);
    loop {
        let wait = limits
            .remaining()
            .map_or(CANCEL_POLL, |left| left.min(CANCEL_POLL));
        match from_tool.recv_timeout(wait) {
            Ok(FromTool::Done(output)) => {
                return WatchedCall {
                    output,
                    interrupted: None,
                };
            }
            Ok(FromTool::Chat {
                instruction,
                max_tokens,
                reply,
            }) => {
                let answer = match model.as_deref_mut() {
                    Some(model) => model.chat(&instruction, max_tokens),
                    None => Err(ChatError::Failed("no model is there".into())),
                };
                let _ = reply.send(answer);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return failed("it stopped unexpectedly".into()),
        }
        if let Some(why) = limits.interruption() {
            return WatchedCall {
                output: ToolOutput {
                    observation: why.observation(tag),
                    success: false,
                    elapsed: started.elapsed(),
                },
                interrupted: Some(why),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Blocks until `release` is set (or a minute passed), then answers; asks the model first
    /// when `ask` is set.
    struct Blocking {
        release: Arc<AtomicBool>,
        ask: bool,
    }

    impl Tool for Blocking {
        fn tag(&self) -> Tag {
            Tag::CrawlPage
        }

        fn call(&self, input: &str, context: &mut CallContext<'_>) -> ToolOutput {
            let asked = match (self.ask, context.model.as_deref_mut()) {
                (true, Some(model)) => model.chat(input, 7).unwrap_or_else(|e| format!("{e:?}")),
                _ => String::new(),
            };
            let started = Instant::now();
            while !self.release.load(Ordering::SeqCst)
                && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            ToolOutput {
                observation: format!("done {asked} {:?}", context.last_think),
                success: true,
                elapsed: started.elapsed(),
            }
        }
    }

    struct Answers(Vec<(String, usize)>);

    impl ChatModel for Answers {
        fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
            self.0.push((instruction.to_string(), max_tokens));
            Ok(format!("answer to {instruction}"))
        }
    }

    fn blocking(ask: bool) -> (Arc<dyn Tool>, Arc<AtomicBool>) {
        let release = Arc::new(AtomicBool::new(false));
        let tool = Blocking {
            release: release.clone(),
            ask,
        };
        (Arc::new(tool), release)
    }

    #[test]
    fn a_finished_call_gives_its_output_and_its_model_calls_are_answered_here() {
        let (tool, release) = blocking(true);
        release.store(true, Ordering::SeqCst);
        let mut model = Answers(Vec::new());
        let context = CallContext {
            last_think: Some("a thought"),
            last_search: None,
            model: Some(&mut model),
            limits: CallLimits::default(),
        };
        let call = call_watched(tool, "page", context);
        assert_eq!(call.interrupted, None);
        assert_eq!(
            call.output.observation,
            "done answer to page Some(\"a thought\")"
        );
        assert!(call.output.success);
        assert_eq!(model.0, [("page".to_string(), 7)]);
    }

    #[test]
    fn the_deadline_ends_a_blocked_call_with_an_observation_that_says_so() {
        let (tool, release) = blocking(false);
        let started = Instant::now();
        let context = CallContext {
            limits: CallLimits {
                deadline: Some(started + Duration::from_millis(200)),
                cancel: None,
            },
            ..CallContext::default()
        };
        let call = call_watched(tool, "page", context);
        release.store(true, Ordering::SeqCst);
        assert_eq!(call.interrupted, Some(Interruption::OutOfTime));
        assert_eq!(
            call.output.observation,
            "The crawl_page call was stopped before it finished: the run's time ran out."
        );
        assert!(!call.output.success);
        assert!(started.elapsed() >= Duration::from_millis(200));
        // Generous: the tool itself would have blocked for a minute.
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn the_cancel_flag_ends_a_blocked_call() {
        let (tool, release) = blocking(false);
        let cancel: CancelFlag = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            flag.store(true, Ordering::SeqCst);
        });
        let started = Instant::now();
        let context = CallContext {
            limits: CallLimits {
                deadline: Some(started + Duration::from_secs(600)),
                cancel: Some(cancel),
            },
            ..CallContext::default()
        };
        let call = call_watched(tool, "page", context);
        release.store(true, Ordering::SeqCst);
        setter.join().unwrap();
        assert_eq!(call.interrupted, Some(Interruption::Cancelled));
        assert_eq!(
            call.interrupted.map(Interruption::stop_reason),
            Some(StopReason::Cancelled)
        );
        assert!(call.output.observation.ends_with("the run was cancelled."));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    /// Panics: the run goes on with an observation instead.
    struct Panics;

    impl Tool for Panics {
        fn tag(&self) -> Tag {
            Tag::Code
        }

        fn call(&self, _: &str, _: &mut CallContext<'_>) -> ToolOutput {
            panic!("a bug in a tool")
        }
    }

    #[test]
    fn a_tool_that_panics_gives_an_observation() {
        let call = call_watched(Arc::new(Panics), "x", CallContext::default());
        assert_eq!(call.interrupted, None);
        assert_eq!(
            call.output.observation,
            "The code tool failed: it stopped unexpectedly."
        );
    }
}
