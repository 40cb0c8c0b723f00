//! llama.cpp's quantiser in a short-lived child process. The quantiser aborts the whole process on
//! some inputs instead of failing (a block count above 512 trips a `GGML_ASSERT` while it reads the
//! header), and those numbers come from a checkpoint on someone else's server. In `catena serve`
//! and the desktop app an abort must cost the download, not the server; in `catena models import`
//! it must still let the parent remove what the import wrote. So the parent sends one
//! [`Request::Quantize`] frame to a child of its own ([`crate::one_shot`]) and reads one reply. A
//! child that dies without answering becomes [`QuantizeError::Died`], with the signal named.

use super::client::WorkerCommand;
use super::one_shot::{OneShotError, one_shot};
use super::protocol::{QuantizeJob, Reply, Request};
use catena_engine_api::EngineError;
use std::io;
use std::path::PathBuf;

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

/// Runs `job` in a child started by `command` and waits for it (minutes for a 7B model: no
/// deadline). The child's output file is the caller's to remove when this fails.
pub fn quantize_in_child(command: &WorkerCommand, job: &QuantizeJob) -> Result<(), QuantizeError> {
    match one_shot(command, &Request::Quantize(job.clone()), None) {
        Ok(Reply::Quantized) => Ok(()),
        Ok(Reply::Error { error }) => Err(QuantizeError::Refused(error.into())),
        Ok(reply) => Err(QuantizeError::Died(format!(
            "it answered a quantisation with {reply:?}"
        ))),
        Err(OneShotError::Start { program, source }) => {
            Err(QuantizeError::Start { program, source })
        }
        Err(e) => Err(QuantizeError::Died(e.to_string())),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::client::shell;
    use crate::protocol::{ToWorker, read_frame, write_frame};
    use catena_engine_api::QuantType;

    fn job() -> QuantizeJob {
        QuantizeJob {
            input: "in.gguf".into(),
            output: "out.gguf".into(),
            quant: QuantType::Q4KM,
            threads: 1,
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
