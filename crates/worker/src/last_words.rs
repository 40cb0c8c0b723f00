//! A child's standard error, passed on to ours line by line, and the line in it that explains
//! an abort (the engine's [`LLAMA_ABORT_LINE`] and llama.cpp's failed check after it, or a bare
//! `GGML_ASSERT`; a fatal error; Rust's `memory allocation of N bytes failed`), which the exit
//! status alone does not: the one-shot children's and the model worker's.

use catena_engine_api::LLAMA_ABORT_LINE;
use parking_lot::Mutex;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// How long a caller waits for a child's standard error to close once the child has ended.
pub(crate) const LAST_WORDS_WAIT: Duration = Duration::from_secs(2);

/// The longest line of a child's last words kept for an error.
const SAID_CHARS: usize = 300;

/// The relay of one child's standard error.
pub(crate) struct LastWords {
    /// The explaining line, sent when the child's standard error closes.
    said: Mutex<Receiver<Option<String>>>,
}

impl LastWords {
    /// Starts passing `stderr` on, on a thread of its own; `None` if no thread could start.
    pub(crate) fn relay(stderr: impl Read + Send + 'static) -> Option<LastWords> {
        let (send, said) = mpsc::channel();
        std::thread::Builder::new()
            .name("catena-child-stderr".into())
            .spawn(move || {
                let _ = send.send(relay_lines(stderr));
            })
            .ok()?;
        Some(LastWords {
            said: Mutex::new(said),
        })
    }

    /// The line that explains how the child ended, once its standard error has closed, waiting
    /// at most `wait` for that (a child that has ended closes it at once, unless a process it
    /// started still holds it).
    pub(crate) fn said(&self, wait: Duration) -> Option<String> {
        self.said.lock().recv_timeout(wait).ok().flatten()
    }
}

/// Passes each line on and returns the first that explains an abort.
fn relay_lines(stderr: impl Read) -> Option<String> {
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
        let explains = [
            LLAMA_ABORT_LINE,
            "GGML_ASSERT",
            "fatal error",
            "memory allocation of",
        ]
        .iter()
        .any(|mark| text.contains(mark));
        if said.is_none() && explains {
            said = Some(text.trim().chars().take(SAID_CHARS).collect());
        }
    }
}
