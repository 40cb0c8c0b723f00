//! Code answers (PROTOCOL.md §6: the program passes all its tests): the fenced program of the final
//! `<answer>` runs in the WebAssembly sandbox against the task's tests, never anywhere else.

use catena_protocol::fence::{fenced_blocks, is_python};
use serde::{Deserialize, Serialize};

/// The tests of a code task, in the two forms the AFM RL data uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CodeTests {
    /// Standard-input / expected-output pairs: the program reads each input on stdin and must
    /// print the matching output.
    Io {
        #[serde(alias = "stdin")]
        inputs: Vec<String>,
        #[serde(alias = "expected_output")]
        outputs: Vec<String>,
    },
    /// A functional test: the program followed by this snippet (asserts calling the program's
    /// functions) must exit with status 0.
    Assert {
        #[serde(rename = "assert")]
        snippet: String,
    },
}

impl CodeTests {
    /// A one-line description, for a report's "expected" column.
    pub fn describe(&self) -> String {
        match self {
            CodeTests::Io { inputs, .. } => format!("{} stdin/stdout tests", inputs.len()),
            CodeTests::Assert { .. } => "assert tests".to_string(),
        }
    }
}

/// The program of a code-profile answer: its first closed Python (or untagged) fence.
pub fn answer_program(answer: &str) -> Option<&str> {
    fenced_blocks(answer)
        .into_iter()
        .find(|b| b.closed && is_python(b.lang))
        .map(|b| b.body)
}

/// Whether `actual` (a program's stdout) is `expected`, ignoring whitespace at the end of each
/// line and blank lines at the end, as judges of competitive programming do.
pub fn same_output(actual: &str, expected: &str) -> bool {
    output_lines(actual) == output_lines(expected)
}

/// A program's output as judges compare it: its lines without trailing whitespace, without
/// blank lines at the end.
pub fn output_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').map(str::trim_end).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

pub use run::code_passes;

mod run {
    use super::{CodeTests, same_output};
    use catena_sandbox::{Exit, Sandbox, SandboxError};

    /// Whether `program` passes every test, each run in a fresh sandboxed interpreter. A
    /// program that fails to exit with status 0 (an exception, a timeout, a crash, a limit)
    /// or prints the wrong output fails; the runs stop at the first failure. Test lists of
    /// unequal length or no tests at all are the task's fault, and fail too. The error is the
    /// sandbox's own (it could not run anything), not the program's.
    ///
    /// Blocks the thread while the program runs (as the `<code>` tool does): call it from a
    /// plain thread, not from inside an async task.
    pub fn code_passes(
        program: &str,
        tests: &CodeTests,
        sandbox: &Sandbox,
    ) -> Result<bool, SandboxError> {
        match tests {
            CodeTests::Io { inputs, outputs } => {
                if inputs.is_empty() || inputs.len() != outputs.len() {
                    tracing::warn!(
                        inputs = inputs.len(),
                        outputs = outputs.len(),
                        "a code task's tests have no cases or unequal input and output lists"
                    );
                    return Ok(false);
                }
                for (input, expected) in inputs.iter().zip(outputs) {
                    let run = sandbox.run(program, input.as_bytes())?;
                    let passed = run.exit == Exit::Status(0)
                        && run.stdout.dropped() == 0
                        && same_output(&run.stdout.to_text(), expected);
                    if !passed {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            CodeTests::Assert { snippet } => {
                let code = format!("{program}\n\n{snippet}\n");
                Ok(sandbox.run(&code, b"")?.exit == Exit::Status(0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_read_in_both_forms() {
        let io: CodeTests =
            serde_json::from_str(r#"{"inputs": ["1 2\n"], "outputs": ["3\n"]}"#).unwrap();
        assert_eq!(io.describe(), "1 stdin/stdout tests");
        let assert: CodeTests = serde_json::from_str(r#"{"assert": "assert f(1) == 2"}"#).unwrap();
        assert_eq!(
            assert,
            CodeTests::Assert {
                snippet: "assert f(1) == 2".into()
            }
        );
        assert!(serde_json::from_str::<CodeTests>(r#"{"inputs": ["1"]}"#).is_err());
        assert!(serde_json::from_str::<CodeTests>(r#"[]"#).is_err());
    }

    #[test]
    fn the_program_is_the_first_closed_python_fence() {
        assert_eq!(
            answer_program("Here:\n```python\nprint(1)\n```\n"),
            Some("print(1)\n")
        );
        assert_eq!(answer_program("```\nx = 1\n```"), Some("x = 1\n"));
        assert_eq!(
            answer_program("```sh\nls\n```\n```py\nprint(2)\n```"),
            Some("print(2)\n")
        );
        assert_eq!(answer_program("print(1)"), None, "no fence, no program");
        assert_eq!(answer_program("```py\nprint(1)\n"), None, "unclosed");
        assert_eq!(answer_program(""), None);
    }

    #[test]
    fn outputs_compare_line_by_line() {
        assert!(same_output("3\n", "3"));
        assert!(same_output("1 2  \n3\t\n\n\n", "1 2\n3"));
        assert!(same_output("a\r\nb\r\n", "a\nb\n"));
        assert!(!same_output("\n3", "3"), "leading blank lines count");
        assert!(!same_output(" 3", "3"), "leading spaces count");
        assert!(!same_output("3 4", "3\n4"));
        assert!(!same_output("", "0"));
        assert!(same_output("", "\n"));
    }
}
