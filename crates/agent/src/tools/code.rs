//! The `<code>` tool: the program in the block's ```` ```py ```` fence runs in the sandbox, a
//! following ```` ```sh ```` fence is its stdin, and the observation is written in the exact
//! words the AFM code agents were trained on (PROTOCOL.md §3).

use super::{CallContext, CallLimits, Interruption, Tool, ToolOutput, cut_observation};
use catena_protocol::Tag;
use catena_protocol::fence::program_and_stdin;
use catena_sandbox::{Execution, Exit, Sandbox, SandboxError};
use std::sync::Arc;
use std::time::Instant;

/// stderr of a call stopped at the wall deadline (the reference runner's words).
pub const TIMEOUT_MESSAGE: &str =
    "Time out. Check for infinite loops, blocked I/O (e.g., input()), or deadlocks.";

/// The observation when the block holds no fenced program.
pub const NO_PROGRAM_MESSAGE: &str = "[FAILED] No program found. Put the Python program inside a ```py fence within <code>: <code>\n```py\nprint(\"hello\")\n```\n</code>";

/// Runs `<code>` blocks in a sandbox.
pub struct CodeTool {
    sandbox: Arc<Sandbox>,
}

impl CodeTool {
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        CodeTool { sandbox }
    }
}

/// Runs `program` with `stdin` in `sandbox` until it ends, the sandbox's own wall deadline
/// passes, or `limits` stop it, whichever is first, and words the outcome as the observation a
/// model reads (PROTOCOL.md §3). Dropping the sandbox's future stops the guest wherever it is, so
/// a cancelled run or one out of time leaves no program running. Every caller that runs a
/// program for someone else (the `<code>` tool, the MCP server's `run_python`) goes through here,
/// so the same program gets the same words wherever it ran.
pub fn run_program(
    sandbox: &Sandbox,
    program: &str,
    stdin: &[u8],
    limits: &CallLimits,
) -> ToolOutput {
    let started = Instant::now();
    match run_within(sandbox, program, stdin, limits) {
        Ok(Err(why)) => ToolOutput {
            observation: why.observation(Tag::Code),
            success: false,
            elapsed: started.elapsed(),
        },
        Ok(Ok(execution)) => ToolOutput {
            success: execution.exit == Exit::Status(0),
            observation: code_observation(&execution),
            elapsed: started.elapsed(),
        },
        Err(e) => ToolOutput {
            observation: format!(
                "[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\nThe sandbox could not run the program: {e}\n[STDERR:END]"
            ),
            success: false,
            elapsed: started.elapsed(),
        },
    }
}

fn run_within(
    sandbox: &Sandbox,
    program: &str,
    stdin: &[u8],
    limits: &CallLimits,
) -> Result<Result<Execution, Interruption>, SandboxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| SandboxError::Setup(format!("tokio runtime: {e}")))?;
    runtime.block_on(async {
        tokio::select! {
            execution = sandbox.run_async(program, stdin) => execution.map(Ok),
            why = limits.stopped() => Ok(Err(why)),
        }
    })
}

impl Tool for CodeTool {
    fn tag(&self) -> Tag {
        Tag::Code
    }

    fn call(&self, input: &str, context: &mut CallContext<'_>) -> ToolOutput {
        let Some((program, stdin)) = program_and_stdin(input) else {
            return ToolOutput {
                observation: NO_PROGRAM_MESSAGE.to_string(),
                success: false,
                elapsed: std::time::Duration::ZERO,
            };
        };
        let stdin = stdin.unwrap_or("").as_bytes();
        run_program(&self.sandbox, program, stdin, &context.limits)
    }
}

/// The observation for a finished call, cut to the length limit.
pub fn code_observation(execution: &Execution) -> String {
    let stdout = execution.stdout.to_text();
    let stderr = execution.stderr.to_text();
    let text = match &execution.exit {
        Exit::Status(0) => success(&stdout),
        Exit::Status(status) => failure(*status, &stdout, &stderr),
        Exit::Timeout => failure(1, "", TIMEOUT_MESSAGE),
        Exit::Killed(reason) => {
            let stderr = if stderr.trim().is_empty() {
                reason.clone()
            } else {
                format!("{}\n{reason}", stderr.trim_end())
            };
            failure(1, &stdout, &stderr)
        }
    };
    cut_observation(&text)
}

/// Read back by `catena_protocol::printed_output`: the two change together.
fn success(stdout: &str) -> String {
    if stdout.is_empty() {
        "[EXECUTED] Code exited with status 0 (no output).".to_string()
    } else {
        format!(
            "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n{}\n[STDOUT:END]",
            stdout.trim()
        )
    }
}

fn failure(status: i32, stdout: &str, stderr: &str) -> String {
    match (stdout.is_empty(), stderr.is_empty()) {
        (true, true) => format!("[FAILED] Code exited with status {status} (no output)."),
        (true, false) => format!(
            "[FAILED] Code exited with status {status}.\n[STDERR:BEGIN]\n{}\n[STDERR:END]",
            stderr.trim()
        ),
        (false, true) => format!(
            "[FAILED] Code exited with status {status}.\n[STDOUT:BEGIN]\n{}\n[STDOUT:END]",
            stdout.trim()
        ),
        (false, false) => format!(
            "[FAILED] Code exited with status {status} with mixed output:\n[STDOUT:BEGIN]\n{}\n[STDOUT:END]\n[STDERR:BEGIN]\n{}\n[STDERR:END]",
            stdout.trim(),
            stderr.trim()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena_sandbox::CapturedOutput;
    use std::time::Duration;

    fn exec(exit: Exit, stdout: &str, stderr: &str) -> Execution {
        let out = |s: &str| CapturedOutput {
            head: s.as_bytes().to_vec(),
            tail: Vec::new(),
            total: s.len() as u64,
        };
        Execution {
            exit,
            stdout: out(stdout),
            stderr: out(stderr),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn success_texts() {
        assert_eq!(
            code_observation(&exec(Exit::Status(0), "42\n", "warning")),
            "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"
        );
        assert_eq!(
            code_observation(&exec(Exit::Status(0), "", "")),
            "[EXECUTED] Code exited with status 0 (no output)."
        );
    }

    #[test]
    fn the_protocol_reads_back_what_a_program_printed() {
        use catena_protocol::printed_output;
        let text = code_observation(&exec(Exit::Status(0), "count: 1229\n", ""));
        assert_eq!(printed_output(&text), Some("count: 1229"));
        let failed = code_observation(&exec(Exit::Status(1), "1229", "Traceback"));
        assert_eq!(
            printed_output(&failed),
            None,
            "a failed run printed no result"
        );
        let silent = code_observation(&exec(Exit::Status(0), "", ""));
        assert_eq!(printed_output(&silent), None);
    }

    #[test]
    fn failure_texts() {
        assert_eq!(
            code_observation(&exec(Exit::Status(1), "", "Traceback\nValueError\n")),
            "[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\nTraceback\nValueError\n[STDERR:END]"
        );
        assert_eq!(
            code_observation(&exec(Exit::Status(3), "", "")),
            "[FAILED] Code exited with status 3 (no output)."
        );
        assert_eq!(
            code_observation(&exec(Exit::Status(2), " partial ", "")),
            "[FAILED] Code exited with status 2.\n[STDOUT:BEGIN]\npartial\n[STDOUT:END]"
        );
        assert_eq!(
            code_observation(&exec(Exit::Status(1), "a", "b")),
            "[FAILED] Code exited with status 1 with mixed output:\n[STDOUT:BEGIN]\na\n[STDOUT:END]\n[STDERR:BEGIN]\nb\n[STDERR:END]"
        );
    }

    #[test]
    fn timeout_text_drops_stdout() {
        assert_eq!(
            code_observation(&exec(Exit::Timeout, "partial", "")),
            format!(
                "[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\n{TIMEOUT_MESSAGE}\n[STDERR:END]"
            )
        );
    }

    #[test]
    fn long_output_is_cut() {
        let long = "y".repeat(10_000);
        let text = code_observation(&exec(Exit::Status(0), &long, ""));
        assert!(text.chars().count() < 1600);
        assert!(text.starts_with("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\nyyy"));
        assert!(text.ends_with("yyy\n[STDOUT:END]"));
    }
}
