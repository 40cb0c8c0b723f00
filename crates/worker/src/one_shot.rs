//! One request to a short-lived child process and its one reply: how work that may abort the
//! process runs away from the server (a quantisation, [`crate::quantize_in_child`]; a chat
//! template, [`crate::render_in_child`]). The child is the same binary's `worker` command (the
//! [`WorkerCommand`] the model worker uses, which both binaries dispatch); its first and only
//! frame says what to do instead of `Start`.

use crate::client::{WorkerCommand, describe_exit};
use crate::last_words::{LAST_WORDS_WAIT, LastWords};
use crate::protocol::{FromWorker, Reply, Request, ToWorker, read_frame, write_frame};
use parking_lot::Mutex;
use std::io::{self, BufReader};
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Why a one-shot child gave no reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OneShotError {
    #[error("could not start the process {}: {source}", program.display())]
    Start { program: PathBuf, source: io::Error },
    /// It ended without an answer: an abort, a crash or a kill. `said` is the first line of its
    /// standard error that explains an abort, when there was one.
    #[error("{status}{}", said.as_ref().map(|s| format!("; it said: {s}")).unwrap_or_default())]
    Died {
        status: String,
        said: Option<String>,
    },
    /// It was still at work when the deadline passed, and was killed (`status`: how it ended).
    #[error("it ran for more than {} s and was stopped ({status})", deadline.as_secs_f32())]
    TimedOut { deadline: Duration, status: String },
}

/// Sends `request` to a child started by `command` and waits for its reply, at most `deadline`
/// when one is given (the child is then killed). The child is waited for in every case: none is
/// left behind.
pub(crate) fn one_shot(
    command: &WorkerCommand,
    request: &Request,
    deadline: Option<Duration>,
) -> Result<Reply, OneShotError> {
    let mut child = command
        .process()
        .spawn()
        .map_err(|source| OneShotError::Start {
            program: command.program.clone(),
            source,
        })?;
    let last_words = child.stderr.take().and_then(LastWords::relay);
    let pipes = (child.stdin.take(), child.stdout.take());
    let child = Arc::new(Mutex::new(child));
    let (answered, watch) = mpsc::channel::<()>();
    let timed_out = deadline.and_then(|deadline| {
        let child = child.clone();
        std::thread::Builder::new()
            .name("catena-child-deadline".into())
            .spawn(move || {
                let expired = watch.recv_timeout(deadline) == Err(mpsc::RecvTimeoutError::Timeout);
                if expired {
                    // Under the lock that `reap` waits with: a child already reaped is not
                    // signalled again (std keeps its status), so no other process's pid is hit.
                    let _ = child.lock().kill();
                }
                expired
            })
            .ok()
    });
    let answer = match pipes {
        (Some(mut stdin), Some(stdout)) => {
            let answer = write_frame(&mut stdin, &ToWorker { lane: 0, request })
                .and_then(|()| read_frame::<FromWorker>(&mut BufReader::new(stdout)));
            // Closing the child's input is what lets it end (it exits when its input does).
            drop(stdin);
            answer
        }
        _ => Err(io::Error::other("its pipes were not created")),
    };
    // The deadline stays armed until the child is reaped: one that answered and then does not
    // end is stopped after a short grace rather than waited for without bound.
    let status = reap(&child, EXIT_GRACE);
    drop(answered);
    let timed_out = timed_out.is_some_and(|thread| thread.join().unwrap_or(false));
    let said = last_words.and_then(|words| words.said(LAST_WORDS_WAIT));
    match answer {
        Ok(Some(FromWorker { reply, .. })) => Ok(reply),
        _ if timed_out => Err(OneShotError::TimedOut {
            deadline: deadline.unwrap_or_default(),
            status,
        }),
        Ok(None) => Err(OneShotError::Died { status, said }),
        // A broken pipe is the child's death seen from here; its exit status says more.
        Err(e) => Err(OneShotError::Died {
            status: format!("{status} ({e})"),
            said,
        }),
    }
}

/// How long a child may take to end once its input is closed (it ends at once when well).
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Waits for the child to end, at most `grace`, then kills it; returns how it ended. It polls
/// rather than blocking in `wait`, so the deadline's thread can still take the lock and kill.
fn reap(child: &Mutex<Child>, grace: Duration) -> String {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let mut child = child.lock();
        match child.try_wait() {
            Ok(Some(status)) => return describe_exit(status),
            Ok(None) if started.elapsed() < grace => {}
            Ok(None) => {
                let _ = child.kill();
                return match child.wait() {
                    Ok(status) => format!(
                        "{}, stopped as it had not ended {} s after its input closed",
                        describe_exit(status),
                        grace.as_secs()
                    ),
                    Err(e) => format!("its exit status is unknown: {e}"),
                };
            }
            Err(e) => return format!("its exit status is unknown: {e}"),
        }
        drop(child);
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::client::shell;

    #[test]
    fn a_child_past_its_deadline_is_killed_and_said_so() {
        let err = one_shot(
            &shell("exec sleep 600"),
            &Request::Cancel,
            Some(Duration::from_millis(200)),
        )
        .unwrap_err();
        assert!(matches!(err, OneShotError::TimedOut { .. }), "{err}");
        // Killed, not waited out (a sleep left to end would have exited with status 0).
        assert!(err.to_string().contains("more than 0.2 s"), "{err}");
        assert!(err.to_string().contains("SIGKILL"), "{err}");
    }

    #[test]
    fn a_child_that_answers_and_does_not_end_is_stopped_after_a_grace() {
        let mut frame = Vec::new();
        write_frame(
            &mut frame,
            &FromWorker {
                lane: 0,
                reply: Reply::Closed,
            },
        )
        .unwrap();
        let octal: String = frame.iter().map(|b| format!("\\{b:03o}")).collect();
        // It answers, then outlives its closed input by ten minutes: before, the caller waited
        // for all of them.
        let child = shell(&format!("printf '{octal}'; exec sleep 600"));
        // With no deadline (a quantisation's case) and with one longer than the grace.
        for deadline in [None, Some(Duration::from_secs(600))] {
            let reply = one_shot(&child, &Request::Cancel, deadline).unwrap();
            assert!(matches!(reply, Reply::Closed), "{reply:?}");
        }
    }

    #[test]
    fn a_failed_allocation_is_named() {
        let err = one_shot(
            &shell("echo 'memory allocation of 536870912 bytes failed' >&2; kill -ABRT $$"),
            &Request::Cancel,
            None,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("SIGABRT"), "{text}");
        assert!(
            text.contains("memory allocation of 536870912 bytes failed"),
            "{text}"
        );
    }
}
