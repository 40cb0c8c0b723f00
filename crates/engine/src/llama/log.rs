//! llama.cpp's log, sent to `tracing` and kept briefly so a failure can be explained.
//!
//! llama.cpp reports why a model failed to load only in its log; the API returns a null pointer.
//! This module installs one process-wide log callback (llama.cpp's logger is process-wide) that
//! forwards every line to `tracing` (target `llama.cpp`) and remembers the most recent lines, so
//! an error can quote what llama.cpp said between two marks. It also installs ggml's abort
//! callback ([`on_abort`]), which names a failed check in llama.cpp in one line.

use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

const KEPT_LINES: usize = 256;

/// A log line's severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Default)]
struct State {
    /// Lines seen, with their sequence numbers.
    recent: VecDeque<(u64, Level, String)>,
    next_seq: u64,
    /// A line still being written (llama.cpp sends some lines in pieces).
    partial: String,
    partial_level: Option<Level>,
}

/// The log capture; one per process, created by [`install`].
pub struct LogCapture {
    state: Mutex<State>,
}

static CAPTURE: OnceLock<LogCapture> = OnceLock::new();

/// Installs the callback (once) and returns the capture.
pub fn install() -> &'static LogCapture {
    let mut fresh = false;
    let capture = CAPTURE.get_or_init(|| {
        fresh = true;
        LogCapture {
            state: Mutex::new(State::default()),
        }
    });
    if fresh {
        let user_data = capture as *const LogCapture as *mut c_void;
        // SAFETY: `callback` matches ggml's log callback signature, and `user_data` points to a
        // `LogCapture` inside a static `OnceLock`, so it is valid for the rest of the process.
        unsafe { llama_cpp_sys_2::llama_log_set(Some(callback), user_data) };
        // SAFETY: `on_abort` matches ggml's abort callback signature and uses nothing that
        // could be gone when it is called.
        unsafe { llama_cpp_sys_2::ggml_set_abort_callback(Some(on_abort)) };
    }
    capture
}

/// Called by ggml just before it aborts the process on a failed check (`GGML_ASSERT`), with the
/// check's source line. ggml's own handler prints that line and then a backtrace by attaching
/// a debugger to the process (seconds of a debugger's output where one is installed); this says
/// in one line what stopped Catena. The process still aborts when it returns: llama.cpp's state
/// cannot be trusted after a failed check. Model files Catena can check are checked before
/// llama.cpp reads them (docs/ARCHITECTURE.md, hostile inputs), so this is the net for the rest.
unsafe extern "C" fn on_abort(message: *const c_char) {
    // Each of ggml's compute threads can fail the same check at once: one line is enough. A
    // later thread waits for the first to write it and abort, rather than abort before it has.
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_secs(2));
        return;
    }
    let message = if message.is_null() {
        "(no message)".into()
    } else {
        // SAFETY: ggml passes a NUL-terminated string valid for the duration of the call.
        unsafe { CStr::from_ptr(message) }.to_string_lossy()
    };
    // Never unwind into C; a failed write changes nothing, the process ends either way.
    let _ = std::panic::catch_unwind(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "{}: {}",
            catena_engine_api::LLAMA_ABORT_LINE,
            without_folders(&message)
        );
    });
}

/// `llama-model.cpp:1330: ...` from `/home/.../llama.cpp/src/llama-model.cpp:1330: ...`: the
/// build machine's folders say nothing to the user.
fn without_folders(message: &str) -> &str {
    let head = message.find(": ").map_or(message, |end| &message[..end]);
    match head.rfind('/') {
        Some(slash) => &message[slash + 1..],
        None => message,
    }
}

impl LogCapture {
    /// A mark: lines logged after it can be read with [`LogCapture::since`].
    pub fn mark(&self) -> u64 {
        self.lock().next_seq
    }

    /// The error lines logged since `mark`, oldest first, or the warnings when there is no
    /// error: what explains a failure, without the warnings that came before its reason (a
    /// vocabulary's "control-looking token" ahead of a tensor of the wrong shape).
    pub fn problems_since(&self, mark: u64) -> Vec<String> {
        let state = self.lock();
        let at = |wanted: Level| -> Vec<String> {
            state
                .recent
                .iter()
                .filter(|(seq, level, _)| *seq >= mark && *level == wanted)
                .map(|(_, _, line)| line.clone())
                .collect()
        };
        let errors = at(Level::Error);
        if errors.is_empty() {
            at(Level::Warn)
        } else {
            errors
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state inconsistent: keep logging.
        self.state.lock()
    }

    fn record(&self, level: Option<Level>, text: &str) {
        let mut state = self.lock();
        let level = level.or(state.partial_level).unwrap_or(Level::Info);
        state.partial.push_str(text);
        state.partial_level = Some(level);
        if !state.partial.ends_with('\n') {
            return;
        }
        let line = std::mem::take(&mut state.partial);
        state.partial_level = None;
        let line = line.trim_end().to_string();
        if line.is_empty() {
            return;
        }
        match level {
            Level::Debug => tracing::debug!(target: "llama.cpp", "{line}"),
            Level::Info => tracing::debug!(target: "llama.cpp", "{line}"),
            Level::Warn => tracing::warn!(target: "llama.cpp", "{line}"),
            Level::Error => tracing::error!(target: "llama.cpp", "{line}"),
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.recent.push_back((seq, level, line));
        while state.recent.len() > KEPT_LINES {
            state.recent.pop_front();
        }
    }
}

fn level_of(level: llama_cpp_sys_2::ggml_log_level) -> Option<Level> {
    match level {
        llama_cpp_sys_2::GGML_LOG_LEVEL_DEBUG => Some(Level::Debug),
        llama_cpp_sys_2::GGML_LOG_LEVEL_WARN => Some(Level::Warn),
        llama_cpp_sys_2::GGML_LOG_LEVEL_ERROR => Some(Level::Error),
        // CONT continues the previous line at its level.
        llama_cpp_sys_2::GGML_LOG_LEVEL_CONT => None,
        _ => Some(Level::Info),
    }
}

unsafe extern "C" fn callback(
    level: llama_cpp_sys_2::ggml_log_level,
    text: *const c_char,
    user_data: *mut c_void,
) {
    if text.is_null() || user_data.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for the duration of the call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    // SAFETY: `user_data` is the `&'static LogCapture` given to `llama_log_set` in `install`.
    let capture = unsafe { &*(user_data as *const LogCapture) };
    // Never unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        capture.record(level_of(level), &text)
    }));
}

#[cfg(test)]
mod tests {
    use super::without_folders;

    #[test]
    fn the_build_machines_folders_are_cut_from_a_failed_check() {
        assert_eq!(
            without_folders("/src/llama.cpp/src/llama-model.cpp:1330: GGML_ASSERT(a/b) failed"),
            "llama-model.cpp:1330: GGML_ASSERT(a/b) failed"
        );
        assert_eq!(without_folders("a/b: fatal error"), "b: fatal error");
        assert_eq!(without_folders("fatal error"), "fatal error");
    }
}
