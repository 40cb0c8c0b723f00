//! Example calls: what two programs that define a function are compared on when a task has no
//! inputs of its own (docs/ARCHITECTURE.md, "Samples and votes").
//!
//! A HumanEval-like task asks for a function, and its tests are asserts the voters must not see.
//! Programs that only define the function print nothing, so on standard input alone every one of
//! them looks the same and the vote falls to the likeliest chain. The task's text usually shows
//! the function at work (`>>> has_close_elements([1.0, 2.0, 3.0], 0.5)`), and the chains test
//! their programs with calls of their own: the values those calls return tell the programs apart
//! without the hidden tests.

/// At most this many calls are tried per program, the task's first.
const MOST_CALLS: usize = 16;
/// A longer call is not an example a person wrote.
const LONGEST_CALL: usize = 400;
/// Printed before the calls' values, so what the program itself prints is not compared.
const MARKER: &str = "--- catena: the example calls ---";

/// Calls of the functions that `programs` define at their top level, found in `texts` (the task
/// first, then the programs the chains ran), each once, at most [`MOST_CALLS`]. A call is the
/// function's name and its balanced parentheses on one line; a `def` line is not a call.
pub fn example_calls<'t>(
    texts: impl IntoIterator<Item = &'t str>,
    programs: &[&str],
) -> Vec<String> {
    let mut names: Vec<&str> = programs.iter().flat_map(|p| defined_functions(p)).collect();
    names.sort_unstable();
    names.dedup();
    let mut calls: Vec<String> = Vec::new();
    for text in texts {
        for line in text.lines() {
            for name in &names {
                for call in calls_in_line(line, name) {
                    if calls.len() < MOST_CALLS && !calls.iter().any(|c| c == call) {
                        calls.push(call.to_string());
                    }
                }
            }
        }
    }
    calls
}

/// `program` followed by a part that prints each call's value (`repr`), or the exception it
/// raised, after a marker line. Each call is compiled on its own, so one that does not parse
/// cannot stop the others.
pub fn with_calls(program: &str, calls: &[String]) -> String {
    let mut probed = String::with_capacity(program.len() + 128 * calls.len());
    probed.push_str(program);
    probed.push_str(&format!("\n\nprint({})\n", python_string(MARKER)));
    for call in calls {
        probed.push_str(&format!(
            "try:\n    print(repr(eval({})))\nexcept BaseException as _catena_error:\n    \
             print('raised', type(_catena_error).__name__)\n",
            python_string(call)
        ));
    }
    probed
}

/// What the calls printed: the output after the last marker line, or `None` when the program
/// never reached the calls.
pub fn calls_output(stdout: &str) -> Option<&str> {
    let at = stdout.rfind(MARKER)?;
    Some(stdout[at + MARKER.len()..].trim_start_matches(['\r', '\n']))
}

/// A Python string literal holding `text`: a JSON string is one.
fn python_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// Names of the functions `program` defines without indentation (`def name(`).
fn defined_functions(program: &str) -> Vec<&str> {
    program
        .lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("def ")
                .or_else(|| line.strip_prefix("async def "))?;
            let end = rest.find('(')?;
            let name = rest[..end].trim();
            is_identifier(name).then_some(name)
        })
        .collect()
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every call of `name` in `line`: the name at a word's start, not after `def` or a `.`, and its
/// parentheses balanced outside string literals.
fn calls_in_line<'l>(line: &'l str, name: &str) -> Vec<&'l str> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = line[from..].find(name) {
        let start = from + offset;
        from = start + name.len();
        let before = &line[..start];
        let glued = before
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if glued || before.trim_end().ends_with("def") || !line[from..].starts_with('(') {
            continue;
        }
        if let Some(len) = balanced(&line[from..]) {
            let call = &line[start..from + len];
            if call.len() <= LONGEST_CALL {
                found.push(call);
            }
        }
    }
    found
}

/// The length of the parenthesised group `text` starts with, string literals skipped; `None`
/// when it does not close on this line.
fn balanced(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "Complete the function.\n\n```python\ndef has_close_elements(numbers, threshold):\n    \"\"\" Any two closer than threshold?\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    \"\"\"\n```";

    #[test]
    fn the_tasks_examples_and_the_chains_own_calls_are_found() {
        let program = "import math\n\ndef has_close_elements(numbers, threshold):\n    def inner(x):\n        return x\n    return False\n";
        let tested = "print(has_close_elements([1, 1.05], 0.1))\nx = obj.has_close_elements(1)\nprint(has_close_elements([1.0, 2.0, 3.0], 0.5))";
        assert_eq!(
            example_calls([TASK, tested], &[program]),
            [
                "has_close_elements([1.0, 2.0, 3.0], 0.5)",
                "has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)",
                "has_close_elements([1, 1.05], 0.1)",
            ]
        );
        // Nested functions are not the task's; a program that defines nothing gets no calls.
        assert!(example_calls([TASK], &["print(inner(3))"]).is_empty());
    }

    #[test]
    fn parentheses_inside_strings_and_unclosed_calls() {
        assert_eq!(
            calls_in_line(">>> f('(', \")\\\")\") == 2 and f([1, (2, 3)])", "f"),
            ["f('(', \")\\\")\")", "f([1, (2, 3)])"]
        );
        assert!(calls_in_line("f(1, 2", "f").is_empty());
        assert!(calls_in_line("def f(x):", "f").is_empty());
        assert!(calls_in_line("g = ff(1) + f (1)", "f").is_empty());
        assert!(calls_in_line("f(1))", "f") == ["f(1)"]);
    }

    #[test]
    fn calls_are_probed_one_by_one_after_a_marker() {
        let probed = with_calls("print('mine')", &["f(1)".into(), "f('\"x\"'".into()]);
        assert!(probed.starts_with("print('mine')\n"));
        assert!(probed.contains("print(repr(eval(\"f(1)\")))"));
        assert!(probed.contains("eval(\"f('\\\"x\\\"'\")"));
        assert_eq!(calls_output("mine\nother\n"), None);
        let stdout = format!("mine\n{MARKER}\n1\nraised SyntaxError\n");
        assert_eq!(calls_output(&stdout), Some("1\nraised SyntaxError\n"));
    }
}
