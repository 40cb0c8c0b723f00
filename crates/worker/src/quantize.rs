//! llama.cpp's quantiser in a short-lived child process. The quantiser aborts the whole process on
//! some inputs instead of failing (a block count above 512 trips a `GGML_ASSERT` while it reads the
//! header), and those numbers come from a checkpoint on someone else's server. In `catena serve`
//! and the desktop app an abort must cost the download, not the server; in `catena models import`
//! it must still let the parent remove what the import wrote. So the parent starts the same
//! binary's `worker` command (the [`WorkerCommand`] the model worker uses, which both binaries
//! dispatch), sends one [`Request::Quantize`] frame instead of `Start`, and reads one reply. A
//! child that dies without answering becomes [`QuantizeError::Died`], with the signal named.

use super::client::{WorkerCommand, describe_exit};
use super::protocol::{FromWorker, QuantizeJob, Reply, Request, ToWorker, read_frame, write_frame};
use catena_engine_api::EngineError;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Why a quantisation in a child process failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("could not start the quantiser process {}: {source}", program.display())]
    Start { program: PathBuf, source: io::Error },
    /// llama.cpp refused the file and said why.
    #[error("{0}")]
    Refused(EngineError),
    /// The child ended without an answer: an abort, a crash or a kill.
    #[error("the quantiser process stopped: {0}")]
    Died(String),
}

/// Runs `job` in a child started by `command` and waits for it (minutes for a 7B model). The
/// child's output file is the caller's to remove when this fails.
pub fn quantize_in_child(command: &WorkerCommand, job: &QuantizeJob) -> Result<(), QuantizeError> {
    let mut child = Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| QuantizeError::Start {
            program: command.program.clone(),
            source,
        })?;
    let relay = child.stderr.take().and_then(|stderr| {
        std::thread::Builder::new()
            .name("catena-quantize-stderr".into())
            .spawn(move || relay_stderr(stderr))
            .ok()
    });
    let answer = match (child.stdin.take(), child.stdout.take()) {
        (Some(mut stdin), Some(stdout)) => {
            let request = Request::Quantize(job.clone());
            let answer = write_frame(
                &mut stdin,
                &ToWorker {
                    lane: 0,
                    request: &request,
                },
            )
            .and_then(|()| read_frame::<FromWorker>(&mut BufReader::new(stdout)));
            // Closing the child's input is what lets it end (it exits when its input does).
            drop(stdin);
            answer
        }
        _ => Err(io::Error::other("its pipes were not created")),
    };
    // Waited for in every case: a child is never left behind.
    let mut status = match child.wait() {
        Ok(status) => describe_exit(status),
        Err(e) => format!("its exit status is unknown: {e}"),
    };
    if let Some(said) = relay.and_then(|thread| thread.join().ok()).flatten() {
        status = format!("{status}; it said: {said}");
    }
    match answer {
        Ok(Some(FromWorker {
            reply: Reply::Quantized,
            ..
        })) => Ok(()),
        Ok(Some(FromWorker {
            reply: Reply::Error { error },
            ..
        })) => Err(QuantizeError::Refused(error.into())),
        Ok(Some(FromWorker { reply, .. })) => Err(QuantizeError::Died(format!(
            "it answered a quantisation with {reply:?}"
        ))),
        Ok(None) => Err(QuantizeError::Died(status)),
        // A broken pipe is the child's death seen from here; its exit status says more.
        Err(e) => Err(QuantizeError::Died(format!("{status} ({e})"))),
    }
}

/// The longest line of the child's last words kept for the error.
const SAID_CHARS: usize = 300;

/// Passes the child's standard error on to ours, line by line, and returns the first line that
/// explains an abort (ggml's `file:line: GGML_ASSERT(...) failed` or a fatal error), which the
/// exit status alone does not.
fn relay_stderr(stderr: impl Read) -> Option<String> {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut said = None;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return said,
            Ok(_) => {}
        }
        let _ = io::stderr().write_all(&line);
        let text = String::from_utf8_lossy(&line);
        if said.is_none() && (text.contains("GGML_ASSERT") || text.contains("fatal error")) {
            said = Some(
                without_folders(text.trim())
                    .chars()
                    .take(SAID_CHARS)
                    .collect(),
            );
        }
    }
}

/// `llama-model.cpp:1330: ...` from `/home/.../llama.cpp/src/llama-model.cpp:1330: ...`: the
/// build machine's folders say nothing to the user.
fn without_folders(line: &str) -> &str {
    let head = line.find(": ").map_or(line, |end| &line[..end]);
    match head.rfind('/') {
        Some(slash) => &line[slash + 1..],
        None => line,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use catena_engine_api::QuantType;

    fn job() -> QuantizeJob {
        QuantizeJob {
            input: "in.gguf".into(),
            output: "out.gguf".into(),
            quant: QuantType::Q4KM,
            threads: 1,
        }
    }

    fn shell(script: &str) -> WorkerCommand {
        WorkerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
        }
    }

    #[test]
    fn an_abort_in_the_child_is_an_error_that_names_it() {
        // What a failed GGML assertion does to the process: SIGABRT, no answer.
        let err = quantize_in_child(&shell("kill -ABRT $$"), &job()).unwrap_err();
        assert!(matches!(err, QuantizeError::Died(_)), "{err}");
        assert!(err.to_string().contains("SIGABRT"), "{err}");
        // The child that reads the request and dies after it.
        let err =
            quantize_in_child(&shell("head -c 4 >/dev/null; kill -ABRT $$"), &job()).unwrap_err();
        assert!(err.to_string().contains("SIGABRT"), "{err}");
        // ggml's last words are kept in the error.
        let err = quantize_in_child(
            &shell("echo 'llama-model.cpp:1330: GGML_ASSERT(n_layer <= 512) failed' >&2; kill -ABRT $$"),
            &job(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("GGML_ASSERT(n_layer <= 512) failed"),
            "{err}"
        );
        assert_eq!(
            without_folders("/src/llama.cpp/src/llama-model.cpp:1330: GGML_ASSERT(a/b) failed"),
            "llama-model.cpp:1330: GGML_ASSERT(a/b) failed"
        );
        assert_eq!(without_folders("a/b: fatal error"), "b: fatal error");
        assert_eq!(without_folders("fatal error"), "fatal error");
        let err = quantize_in_child(&shell("exit 3"), &job()).unwrap_err();
        assert!(err.to_string().contains("status 3"), "{err}");
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_panic() {
        let command = WorkerCommand {
            program: "/nonexistent/catena".into(),
            args: vec!["worker".into()],
        };
        let err = quantize_in_child(&command, &job()).unwrap_err();
        assert!(matches!(err, QuantizeError::Start { .. }), "{err}");
    }

    #[test]
    fn the_request_and_its_answers_cross_the_pipe() {
        let mut wire = Vec::new();
        let request = Request::Quantize(job());
        write_frame(
            &mut wire,
            &ToWorker {
                lane: 0,
                request: &request,
            },
        )
        .unwrap();
        match read_frame::<ToWorker>(&mut wire.as_slice()).unwrap() {
            Some(ToWorker {
                request: Request::Quantize(back),
                ..
            }) => assert_eq!(back, job()),
            other => panic!("unexpected {other:?}"),
        }
        let json = String::from_utf8_lossy(&wire[4..]).into_owned();
        assert!(json.contains("\"Q4_K_M\""), "{json}");
    }
}
