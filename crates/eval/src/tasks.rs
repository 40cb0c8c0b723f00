//! Reading task sets: our JSONL, or the verl parquet layout the AFM RL data uses (PROTOCOL.md §5).

use super::{EvalError, EvalTask};
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

fn read_parquet(path: &Path) -> Result<Vec<EvalTask>, EvalError> {
    super::parquet::read_tasks(path)
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
}
