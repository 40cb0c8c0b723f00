//! Task sets in verl's parquet layout, as the AFM RL data ships (PROTOCOL.md §5): per row the
//! chat `prompt`, the `data_source` that picks the verifier, `reward_model.ground_truth` and
//! `extra_info.index`.
//!
//! Rows are read with the parquet crate's record API and turned into JSON values first, so the
//! same code accepts what different writers make of one dataset: a ground truth stored as a
//! string, a JSON string, a list, or a struct (`{"target": [...]}` in search-agent data;
//! `{"inputs", "outputs"}` when pandas wrote a dict).

use super::source::kind_of_source;
use super::{CodeTests, EvalError, EvalTask, TaskKind};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};
use serde_json::{Map, Value};
use std::path::Path;

/// Reads every row of a verl parquet file as a task.
pub(super) fn read_tasks(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    let file = std::fs::File::open(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // The parquet crate is written not to panic on bad files, but a task file is outside
    // input and a panic deep in a decoder would take the whole evaluation (or training run)
    // down: turn one into an error naming the file instead.
    let read = std::panic::catch_unwind(move || read_rows(file));
    let rows = match read {
        Ok(rows) => rows,
        Err(_) => Err("the parquet reader failed on this file".to_string()),
    }
    .map_err(|reason| EvalError::Parquet {
        path: path.to_path_buf(),
        reason,
    })?;
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            task_of_row(row, i).map_err(|reason| EvalError::BadRow {
                path: path.to_path_buf(),
                row: i,
                reason,
            })
        })
        .collect()
}

fn read_rows(file: std::fs::File) -> Result<Vec<Value>, String> {
    let reader = SerializedFileReader::new(file).map_err(|e| e.to_string())?;
    let rows = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    rows.map(|row| row.map(|r| row_json(&r)).map_err(|e| e.to_string()))
        .collect()
}

fn row_json(row: &Row) -> Value {
    Value::Object(
        row.get_column_iter()
            .map(|(name, field)| (name.clone(), field_json(field)))
            .collect(),
    )
}

fn field_json(field: &Field) -> Value {
    match field {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(v) => Value::from(*v),
        Field::Short(v) => Value::from(*v),
        Field::Int(v) => Value::from(*v),
        Field::Long(v) => Value::from(*v),
        Field::UByte(v) => Value::from(*v),
        Field::UShort(v) => Value::from(*v),
        Field::UInt(v) => Value::from(*v),
        Field::ULong(v) => Value::from(*v),
        Field::Float(v) => Value::from(f64::from(*v)),
        Field::Double(v) => Value::from(*v),
        Field::Str(s) => Value::String(s.clone()),
        Field::Group(row) => row_json(row),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(field_json).collect()),
        Field::MapInternal(map) => Value::Object(
            map.entries()
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Field::Str(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (key, field_json(v))
                })
                .collect::<Map<String, Value>>(),
        ),
        // Bytes, decimals, dates and times play no part in a task: keep their text.
        other => Value::String(other.to_string()),
    }
}

/// One row as a task; the error says what the row lacks.
fn task_of_row(row: &Value, index: usize) -> Result<EvalTask, String> {
    let question = question(row.get("prompt").ok_or("no `prompt` column")?)?;
    let source = row
        .get("data_source")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = kind_of_source(source);
    let truth = row
        .get("reward_model")
        .and_then(|r| r.get("ground_truth"))
        .filter(|v| !v.is_null())
        .ok_or("no `reward_model.ground_truth`")?;
    let id = match row.get("extra_info").and_then(|e| e.get("index")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => index.to_string(),
    };
    let (answer, tests) = match kind {
        TaskKind::Code => {
            let tests = code_tests(truth)?;
            (tests.describe(), Some(tests))
        }
        TaskKind::Math | TaskKind::Qa => (answer_text(truth)?, None),
    };
    Ok(EvalTask {
        id,
        question,
        answer,
        family: (!source.is_empty()).then(|| source.to_string()),
        kind: Some(kind),
        tests,
    })
}

/// The question: the content of the prompt's last user message (or the prompt, when a writer
/// stored it as plain text).
fn question(prompt: &Value) -> Result<String, String> {
    match prompt {
        Value::String(s) => Ok(s.clone()),
        Value::Array(messages) => messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| m.get("content").and_then(Value::as_str))
            .map(str::to_string)
            .ok_or_else(|| "`prompt` has no user message with text content".to_string()),
        _ => Err("`prompt` is neither chat messages nor text".to_string()),
    }
}

/// A math or QA ground truth as answer text: a string as is, a one-item list as its item, a
/// longer list as a JSON list (QA alternatives), `{"target": ...}` as its target.
fn answer_text(truth: &Value) -> Result<String, String> {
    match truth {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Array(items) if items.len() == 1 => answer_text(&items[0]),
        Value::Array(items) if !items.is_empty() => Ok(Value::Array(items.clone()).to_string()),
        Value::Object(fields) if fields.contains_key("target") => answer_text(&fields["target"]),
        other => Err(format!(
            "`reward_model.ground_truth` is not an answer: {other}"
        )),
    }
}

/// A code ground truth: a JSON object (or a string holding one) with the tests, or the text
/// of a functional assert snippet.
fn code_tests(truth: &Value) -> Result<CodeTests, String> {
    let bad = |e: serde_json::Error| {
        format!(
            "`reward_model.ground_truth` is not code tests ({e}); expected {{\"inputs\": [...], \"outputs\": [...]}} or {{\"assert\": \"...\"}}"
        )
    };
    match truth {
        Value::Object(_) => serde_json::from_value(truth.clone()).map_err(bad),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => serde_json::from_value(value).map_err(bad),
            _ if text.contains("assert") => Ok(CodeTests::Assert {
                snippet: text.clone(),
            }),
            Ok(_) | Err(_) => Err(
                "`reward_model.ground_truth` is neither JSON tests nor an assert snippet"
                    .to_string(),
            ),
        },
        other => Err(format!(
            "`reward_model.ground_truth` is not code tests: {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Written by scripts/dev/make-verl-fixture.py with pandas and pyarrow.
    fn fixture() -> std::path::PathBuf {
        // The folder `cargo test` gives; the compiled-in one may be another checkout's that
        // shared the build folder, and be gone.
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
                Into::into,
            )
            .join("tests/fixtures/verl_tasks.parquet")
    }

    #[test]
    fn reads_a_file_pandas_wrote() {
        let tasks = crate::read_tasks(&fixture()).unwrap();
        assert_eq!(tasks.len(), 5);
        let prefix = "Solve the task. Put the final answer in <answer></answer>.\n\nTask:\n";
        let expected = [
            (
                "0",
                "lighteval/MATH",
                TaskKind::Math,
                "What is 1/4 + 1/4?",
                "\\frac{1}{2}",
            ),
            (
                "1",
                "livecodebench",
                TaskKind::Code,
                "Read two integers and print their sum.",
                "2 stdin/stdout tests",
            ),
            (
                "2",
                "codecontests",
                TaskKind::Code,
                "Write add(a, b) returning a + b.",
                "assert tests",
            ),
            (
                "3",
                "hotpotqa",
                TaskKind::Qa,
                "Which city is the Eiffel Tower in?",
                r#"["Paris", "City of Paris"]"#,
            ),
            ("4", "aime24", TaskKind::Math, "What is 2^10?", "1024"),
        ];
        for (task, (id, source, kind, question, answer)) in tasks.iter().zip(expected) {
            assert_eq!(task.id, id, "the index, or the row number when it is null");
            assert_eq!(task.family.as_deref(), Some(source));
            assert_eq!(task.kind, Some(kind));
            assert_eq!(task.question, format!("{prefix}{question}"));
            assert_eq!(task.answer, answer);
        }
        assert_eq!(
            tasks[1].tests,
            Some(CodeTests::Io {
                inputs: vec!["1 2\n".into(), "10 -3\n".into()],
                outputs: vec!["3\n".into(), "7\n".into()],
            })
        );
        assert_eq!(
            tasks[2].tests,
            Some(CodeTests::Assert {
                snippet: "assert add(1, 2) == 3\nassert add(-1, 1) == 0".into()
            })
        );
        assert!(
            tasks
                .iter()
                .filter(|t| t.kind != Some(TaskKind::Code))
                .all(|t| t.tests.is_none())
        );
        assert!(crate::reward::qa_exact_match("paris", &tasks[3].answer));
        assert!(crate::reward::math_equivalent("0.5", &tasks[0].answer));
    }

    #[test]
    fn bad_files_are_errors_that_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let good = std::fs::read(fixture()).unwrap();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty.parquet", Vec::new()),
            ("text.parquet", b"id,question\n1,2\n".to_vec()),
            ("head.parquet", good[..good.len() / 2].to_vec()),
            ("tail.parquet", good[good.len() / 2..].to_vec()),
        ];
        // Damage the data pages but keep the footer, so the reader gets as far as decoding.
        let mut flipped = good.clone();
        for b in flipped.iter_mut().skip(8).take(good.len() / 2).step_by(7) {
            *b ^= 0x5a;
        }
        cases.push(("flipped.parquet", flipped));
        for (name, bytes) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let err = crate::read_tasks(&path).unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
        let missing = dir.path().join("missing.parquet");
        assert!(matches!(
            crate::read_tasks(&missing),
            Err(EvalError::Io { .. })
        ));
    }

    #[test]
    fn rows_become_tasks() {
        let row = json!({
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
                       {"role": "assistant", "content": "a"}, {"role": "user", "content": "What?"}],
            "data_source": "hotpotqa",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Paris", "paris city"]}},
            "extra_info": {"index": 7, "split": "test"}
        });
        let task = task_of_row(&row, 0).unwrap();
        assert_eq!(task.question, "What?");
        assert_eq!(task.id, "7");
        assert_eq!(task.kind, Some(TaskKind::Qa));
        assert_eq!(task.answer, r#"["Paris","paris city"]"#);
        assert_eq!(task.family.as_deref(), Some("hotpotqa"));

        let row = json!({"prompt": "Solve 1+1", "data_source": "unknown",
                         "reward_model": {"ground_truth": ["2"]}});
        let task = task_of_row(&row, 3).unwrap();
        assert_eq!((task.id.as_str(), task.answer.as_str()), ("3", "2"));
        assert_eq!(task.kind, Some(TaskKind::Math));
    }

    #[test]
    fn code_truths_in_every_form() {
        let io = r#"{"inputs": ["1\n"], "outputs": ["1\n"]}"#;
        for truth in [json!(io), serde_json::from_str::<Value>(io).unwrap()] {
            let tests = code_tests(&truth).unwrap();
            assert!(matches!(tests, CodeTests::Io { .. }));
        }
        let aliased = json!(r#"{"stdin": ["2"], "expected_output": ["4"]}"#);
        assert!(matches!(
            code_tests(&aliased).unwrap(),
            CodeTests::Io { .. }
        ));
        let snippet = json!("assert add(1, 2) == 3");
        assert_eq!(
            code_tests(&snippet).unwrap(),
            CodeTests::Assert {
                snippet: "assert add(1, 2) == 3".into()
            }
        );
        assert!(code_tests(&json!("print(1)")).is_err());
        assert!(code_tests(&json!(r#"{"inputs": 3}"#)).is_err());
        assert!(code_tests(&json!(5)).is_err());
    }

    #[test]
    fn rows_missing_parts_are_named() {
        let err = task_of_row(&json!({"reward_model": {"ground_truth": "1"}}), 0).unwrap_err();
        assert!(err.contains("prompt"), "{err}");
        let err = task_of_row(
            &json!({"prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "1"}}),
            0,
        )
        .unwrap_err();
        assert!(err.contains("user message"), "{err}");
        let err = task_of_row(&json!({"prompt": "q", "reward_model": {}}), 0).unwrap_err();
        assert!(err.contains("ground_truth"), "{err}");
        let err = task_of_row(
            &json!({"prompt": "q", "reward_model": {"ground_truth": []}}),
            0,
        )
        .unwrap_err();
        assert!(err.contains("not an answer"), "{err}");
    }
}
