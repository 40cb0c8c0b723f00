//! Catena as an MCP host in served runs: the servers of the user's `mcp.json`, started once by
//! whoever starts the service, lend their tools to every agent run, and a call of a tool that may
//! change something waits for the user's answer in the UI. The question and the answer are run
//! events (so the timeline shows them and a stored run replays them); the answer comes back
//! through [`crate::Service::answer_approval`].

use crate::live::{Answer, LiveRuns};
use catena_engine_api::CancelFlag;
use catena_mcp_client::{Approval, Approver, ExternalTools, McpServers, PendingCall};
use catena_protocol::Profile;
use catena_run_events::{AgentEvent, DecidedBy};
use catena_store::{Recorder, Store};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// How long a question waits for the user before the call is declined: long enough to notice
/// it, short enough that a forgotten run does not hold its lane for ever.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a waiting question looks at the run's cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// The external MCP servers every agent run of this service may use.
#[derive(Clone)]
pub struct McpHost {
    pub servers: Arc<McpServers>,
    /// Tools that run without asking (`--allow-tool`), though they may change something.
    pub allowed: Arc<HashSet<String>>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("servers", &self.servers.started())
            .field("allowed", &self.allowed)
            .finish()
    }
}

impl McpHost {
    /// `profile` with the servers' tools described and `<tool_call>` enabled.
    pub(crate) fn extend(&self, profile: &Profile) -> Profile {
        profile.with_external_tools(&self.servers.specs())
    }

    /// The `<tool_call>` tool of one run, asking that run's followers before a call that may
    /// change something.
    pub(crate) fn tools_for_run(&self, run: RunQuestions) -> ExternalTools {
        let approver = RunApprover {
            run,
            allowed: self.allowed.clone(),
            asked: AtomicU64::new(0),
            timeout: APPROVAL_TIMEOUT,
        };
        ExternalTools::new(self.servers.clone(), Arc::new(approver))
    }
}

/// Where one run's questions go: its events (stored, then published) and its live entry.
pub(crate) struct RunQuestions {
    pub run: String,
    pub store: Arc<Store>,
    pub live: Arc<LiveRuns>,
    pub cancel: CancelFlag,
    /// The run's own time limit: no question outlives it.
    pub deadline: Option<Instant>,
}

impl RunQuestions {
    fn record(&self, event: &AgentEvent) {
        record(&self.store, &self.live, &self.run, event);
    }
}

/// Stores `event` with run `run`'s others and shows it to the run's followers.
fn record(store: &Store, live: &LiveRuns, run: &str, event: &AgentEvent) {
    let stored = Recorder::new(store, run.to_string()).event(event);
    live.publish(run, stored);
}

/// Declines the questions run `run` has waiting, because it is being stopped: each answer is
/// recorded here, before the run's cancel flag is set, so it comes before the run's end in the
/// timeline; the asker then only passes the refusal on to the model.
pub(crate) fn decline_questions(store: &Store, live: &LiveRuns, run: &str) {
    for (ask, asker) in live.take_questions(run) {
        record(
            store,
            live,
            run,
            &AgentEvent::ApprovalAnswered {
                ask,
                allowed: false,
                decided_by: DecidedBy::Cancelled,
            },
        );
        // An asker that stopped waiting meanwhile recorded its own end.
        let _ = asker.send(Answer::Declined);
    }
}

/// Asks the UI, through the run's events, and waits on the tool's thread for the answer.
struct RunApprover {
    run: RunQuestions,
    allowed: Arc<HashSet<String>>,
    /// Questions asked so far; the next one is numbered one more.
    asked: AtomicU64,
    timeout: Duration,
}

impl Approver for RunApprover {
    fn approve(&self, call: &PendingCall<'_>) -> Approval {
        if self.allowed.contains(call.tool) {
            return Approval::Allowed;
        }
        let ask = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let run = &self.run;
        // Opened before it is shown, so an answer as fast as the UI can give finds it.
        let Some(answers) = run.live.ask(&run.run, ask) else {
            return Approval::Unanswered("the run ended before the user was asked".into());
        };
        run.record(&AgentEvent::ApprovalRequested {
            ask,
            server: call.server.to_string(),
            tool: call.tool.to_string(),
            arguments: serde_json::Value::Object(call.arguments.clone()).to_string(),
        });
        let (approval, decided_by) = self.wait(ask, &answers);
        if let Some(decided_by) = decided_by {
            run.record(&AgentEvent::ApprovalAnswered {
                ask,
                allowed: approval == Approval::Allowed,
                decided_by,
            });
        }
        approval
    }
}

impl RunApprover {
    /// The user's answer to question `ask`, or why there is none; with who decided, unless
    /// that is recorded already.
    fn wait(
        &self,
        ask: u64,
        answers: &std::sync::mpsc::Receiver<Answer>,
    ) -> (Approval, Option<DecidedBy>) {
        let run = &self.run;
        let asked_at = Instant::now();
        let patience = asked_at + self.timeout;
        let until = run.deadline.map_or(patience, |d| d.min(patience));
        let stopped = |decided_by| {
            (
                Approval::Unanswered("the run was stopped before the user answered".into()),
                decided_by,
            )
        };
        loop {
            if run.cancel.load(Ordering::SeqCst) {
                run.live.withdraw(&run.run, ask);
                // Whoever declined it first has recorded that.
                return match answers.try_recv() {
                    Ok(Answer::Declined) => stopped(None),
                    _ => stopped(Some(DecidedBy::Cancelled)),
                };
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                run.live.withdraw(&run.run, ask);
                // An answer that came in just before the question closed still counts.
                match answers.try_recv() {
                    Ok(Answer::User(allow)) => return by_user(allow),
                    Ok(Answer::Declined) => return stopped(None),
                    Err(_) => {}
                }
                let why = if until < patience {
                    "the run's time ran out before the user answered".to_string()
                } else {
                    format!(
                        "the user did not answer within {} s",
                        self.timeout.as_secs()
                    )
                };
                return (Approval::Unanswered(why), Some(DecidedBy::Timeout));
            }
            match answers.recv_timeout(left.min(CANCEL_POLL)) {
                Ok(Answer::User(allow)) => return by_user(allow),
                Ok(Answer::Declined) => return stopped(None),
                Err(RecvTimeoutError::Timeout) => {}
                // The run is no longer live.
                Err(RecvTimeoutError::Disconnected) => return stopped(Some(DecidedBy::Cancelled)),
            }
        }
    }
}

fn by_user(allow: bool) -> (Approval, Option<DecidedBy>) {
    let approval = if allow {
        Approval::Allowed
    } else {
        Approval::Denied
    };
    (approval, Some(DecidedBy::User))
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena_store::{NewRun, RunKind};
    use serde_json::{Map, Value, json};

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Arc<Store>,
        live: Arc<LiveRuns>,
        run: String,
        cancel: CancelFlag,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_in(dir.path()).unwrap());
        let run = store
            .start_run(&NewRun {
                session: None,
                kind: RunKind::Agent,
                task: "write a note",
                profile: Some("code"),
                model: "m",
                adapter: None,
                options: json!({}),
                system_prompt: "S",
                user_prompt: "U",
            })
            .unwrap();
        let live = Arc::new(LiveRuns::default());
        let cancel = live.register(&run);
        Fixture {
            _dir: dir,
            store,
            live,
            run,
            cancel,
        }
    }

    impl Fixture {
        fn approver(&self, allowed: &[&str], timeout: Duration) -> Arc<RunApprover> {
            Arc::new(RunApprover {
                run: RunQuestions {
                    run: self.run.clone(),
                    store: self.store.clone(),
                    live: self.live.clone(),
                    cancel: self.cancel.clone(),
                    deadline: None,
                },
                allowed: Arc::new(allowed.iter().map(|s| s.to_string()).collect()),
                asked: AtomicU64::new(0),
                timeout,
            })
        }

        /// Asks on a thread of its own, as a tool does; returns once the question is shown.
        fn ask(&self, approver: &Arc<RunApprover>) -> std::thread::JoinHandle<Approval> {
            let mut events = self.live.subscribe(&self.run).unwrap();
            let approver = approver.clone();
            let asking = std::thread::spawn(move || {
                let arguments: Map<String, Value> = json!({"path": "/tmp/a", "content": "x"})
                    .as_object()
                    .unwrap()
                    .clone();
                approver.approve(&PendingCall {
                    server: "filesystem",
                    tool: "write_file",
                    arguments: &arguments,
                })
            });
            let shown = events.blocking_recv().unwrap();
            assert_eq!(shown.data["type"], "approval_requested");
            asking
        }

        fn events(&self) -> Vec<Value> {
            let events = self.store.events(&self.run, 0).unwrap();
            events.into_iter().map(|e| e.data).collect()
        }
    }

    #[test]
    fn the_users_answer_decides_and_both_are_recorded() {
        let f = fixture();
        let approver = f.approver(&[], APPROVAL_TIMEOUT);
        let asking = f.ask(&approver);
        assert!(!f.live.answer(&f.run, 2, true), "no question 2 waits");
        assert!(f.live.answer(&f.run, 1, true));
        assert_eq!(asking.join().unwrap(), Approval::Allowed);
        assert!(
            !f.live.answer(&f.run, 1, true),
            "an answered question is gone"
        );

        let asking = f.ask(&approver);
        assert!(f.live.answer(&f.run, 2, false));
        assert_eq!(asking.join().unwrap(), Approval::Denied);

        let events = f.events();
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(events[0]["server"], "filesystem");
        assert_eq!(events[0]["tool"], "write_file");
        let arguments: Value =
            serde_json::from_str(events[0]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments["path"], "/tmp/a");
        assert_eq!(
            events[1],
            json!({"type": "approval_answered", "ask": 1, "allowed": true, "decided_by": "user"})
        );
        assert_eq!(events[3]["ask"], 2);
        assert_eq!(events[3]["allowed"], false);
    }

    #[test]
    fn allowed_tools_do_not_ask() {
        let f = fixture();
        let approver = f.approver(&["write_file"], APPROVAL_TIMEOUT);
        let arguments = Map::new();
        let call = PendingCall {
            server: "filesystem",
            tool: "write_file",
            arguments: &arguments,
        };
        assert_eq!(approver.approve(&call), Approval::Allowed);
        assert!(f.events().is_empty());
    }

    #[test]
    fn an_unanswered_question_is_declined_and_says_why() {
        let f = fixture();
        let approver = f.approver(&[], Duration::ZERO);
        let arguments = Map::new();
        let call = PendingCall {
            server: "filesystem",
            tool: "write_file",
            arguments: &arguments,
        };
        let Approval::Unanswered(why) = approver.approve(&call) else {
            panic!("a question no one answered was decided");
        };
        assert!(why.contains("did not answer within"), "{why}");
        let events = f.events();
        assert_eq!(events[1]["decided_by"], "timeout");
        assert!(!f.live.answer(&f.run, 1, true), "the question closed");
    }

    #[test]
    fn stopping_the_run_declines_its_question_once_before_the_flag() {
        let f = fixture();
        let approver = f.approver(&[], APPROVAL_TIMEOUT);
        let asking = f.ask(&approver);
        decline_questions(&f.store, &f.live, &f.run);
        f.live.cancel(&f.run);
        let Approval::Unanswered(why) = asking.join().unwrap() else {
            panic!("a declined question was allowed");
        };
        assert!(why.contains("stopped"), "{why}");
        let events = f.events();
        assert_eq!(events.len(), 2, "answered once: {events:?}");
        assert_eq!(events[1]["decided_by"], "cancelled");
        assert_eq!(events[1]["allowed"], false);

        // A run that ended asks no one.
        f.live.finish(&f.run);
        let arguments = Map::new();
        let call = PendingCall {
            server: "filesystem",
            tool: "write_file",
            arguments: &arguments,
        };
        assert!(matches!(approver.approve(&call), Approval::Unanswered(_)));
    }
}
