//! Reading task sets: our JSONL, or the verl parquet layout the AFM RL data uses (PROTOCOL.md §5).

use super::{EvalError, EvalTask, TaskKind};
use std::path::Path;

/// Reads a task file: parquet (verl layout, by the `.parquet` extension) or JSONL (one
/// `{"id", "question", "answer"}` per line, optionally `family`, `kind` and `tests`).
pub fn read_tasks(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    let parquet = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let tasks = if parquet {
        read_parquet(path)?
    } else {
        read_jsonl(path)?
    };
    if tasks.is_empty() {
        return Err(EvalError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(tasks)
}

#[cfg(feature = "runtime")]
fn read_parquet(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    super::parquet::read_tasks(path)
}

#[cfg(not(feature = "runtime"))]
fn read_parquet(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    Err(EvalError::ParquetUnsupported {
        path: path.to_path_buf(),
    })
}

fn read_jsonl(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let task: EvalTask = serde_json::from_str(line).map_err(|e| EvalError::BadTask {
            path: path.to_path_buf(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        tasks.push(task);
    }
    Ok(tasks)
}

/// The verifier a verl `data_source` calls for. Names are matched by the benchmark words they
/// contain, math first (so `math_qa` style names stay math), then code, then QA; anything else
/// is math, whose check falls back to string equality.
pub fn kind_of_source(data_source: &str) -> TaskKind {
    const MATH: &[&str] = &["math", "aime", "amc", "gsm"];
    const CODE: &[&str] = &["code", "livecodebench", "codecontests", "taco", "apps"];
    const QA: &[&str] = &[
        "hotpot",
        "musique",
        "2wiki",
        "nq",
        "triviaqa",
        "bamboogle",
        "qa",
    ];
    let source = data_source.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| source.contains(w));
    if any(MATH) {
        TaskKind::Math
    } else if any(CODE) {
        TaskKind::Code
    } else if any(QA) {
        TaskKind::Qa
    } else {
        TaskKind::Math
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_files_are_read_and_bad_lines_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\",\"family\":\"f\"}\n\n{\"id\":\"b\"}\n").unwrap();
        let err = read_tasks(&path).unwrap_err().to_string();
        assert!(err.contains("t.jsonl:3"), "{err}");
        std::fs::write(
            &path,
            "{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\"}\n",
        )
        .unwrap();
        assert_eq!(read_tasks(&path).unwrap()[0].family, None);
        std::fs::write(&path, "\n").unwrap();
        assert!(read_tasks(&path).is_err());
    }

    #[test]
    fn data_sources_pick_their_verifier() {
        for (source, kind) in [
            ("lighteval/MATH", TaskKind::Math),
            ("aime24", TaskKind::Math),
            ("AMC23", TaskKind::Math),
            ("openai/gsm8k", TaskKind::Math),
            ("livecodebench_v5", TaskKind::Code),
            ("deepmind/code_contests", TaskKind::Code),
            ("codecontests", TaskKind::Code),
            ("BAAI/TACO", TaskKind::Code),
            ("codeparrot/apps", TaskKind::Code),
            ("hotpotqa", TaskKind::Qa),
            ("musique", TaskKind::Qa),
            ("2wikimultihopqa", TaskKind::Qa),
            ("nq", TaskKind::Qa),
            ("triviaqa", TaskKind::Qa),
            ("bamboogle", TaskKind::Qa),
            ("my_qa_set", TaskKind::Qa),
            ("synthetic", TaskKind::Math),
            ("", TaskKind::Math),
        ] {
            assert_eq!(kind_of_source(source), kind, "{source}");
        }
    }
}
