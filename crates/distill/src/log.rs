//! Every teacher run of a distillation, one JSON line each, written and synced before the next
//! run starts, so a distillation that is stopped (Ctrl-C, a killed process, a full disk) goes on
//! where it was and never runs a finished task again.

use crate::MultiAgentRun;
use crate::mas::Usage;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, Write};
use std::path::{Path, PathBuf};

/// One teacher run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeacherRun {
    pub run: MultiAgentRun,
    /// Which of the task's runs this is (0-based).
    pub sample: usize,
    pub answer: Option<String>,
    /// Why the run ended (`answer`, `tool_budget`, ...).
    pub stop: String,
    pub usage: Usage,
    pub seconds: f64,
}

/// Why the log cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}, line {line}: not a teacher run ({reason}); the file was changed by something else, so it is left as it is"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

/// The append-only file of teacher runs.
pub struct RunLog {
    path: PathBuf,
    file: File,
}

/// What opening a log found.
pub struct Opened {
    pub log: RunLog,
    /// The runs stored before.
    pub runs: Vec<TeacherRun>,
    /// Bytes of an unfinished last line (a run being written when the process died), cut off.
    pub cut_bytes: u64,
}

impl RunLog {
    /// Opens (or creates) the log at `path` and reads what it holds. An unfinished last line is
    /// cut off; a bad line anywhere else is an error, because it means the file is not only
    /// this log's writing.
    pub fn open(path: &Path) -> Result<Opened, LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io)?;
        let mut runs = Vec::new();
        let mut good_end = 0u64;
        let mut reader = BufReader::new(&mut file);
        let mut line = String::new();
        let mut number = 0;
        let mut unfinished = None;
        loop {
            line.clear();
            let read = reader.read_line(&mut line).map_err(io)?;
            if read == 0 {
                break;
            }
            number += 1;
            if unfinished.is_some() {
                // A bad line followed by more lines is not an interrupted write.
                let (line, reason) = unfinished.take().unwrap_or_default();
                return Err(LogError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    reason,
                });
            }
            match serde_json::from_str::<TeacherRun>(line.trim_end()) {
                Ok(run) if line.ends_with('\n') => {
                    runs.push(run);
                    good_end += read as u64;
                }
                Ok(_) => unfinished = Some((number, "no end of line".to_string())),
                Err(e) => unfinished = Some((number, e.to_string())),
            }
        }
        drop(reader);
        let length = file.metadata().map_err(io)?.len();
        let cut_bytes = length - good_end;
        if cut_bytes > 0 {
            file.set_len(good_end).map_err(io)?;
            file.seek(std::io::SeekFrom::End(0)).map_err(io)?;
        }
        Ok(Opened {
            log: RunLog {
                path: path.to_path_buf(),
                file,
            },
            runs,
            cut_bytes,
        })
    }

    /// Appends one run and syncs it to disk before returning.
    pub fn append(&mut self, run: &TeacherRun) -> Result<(), LogError> {
        let io = |source| LogError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = serde_json::to_vec(run).map_err(|e| io(e.into()))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;
    use crate::convert::tests::act;

    fn teacher_run(id: &str) -> TeacherRun {
        TeacherRun {
            run: MultiAgentRun {
                task_id: id.into(),
                question: "q".into(),
                profile: "math".into(),
                activations: vec![act(Role::Answerer, "\\boxed{1}")],
                reward: 1.0,
            },
            sample: 0,
            answer: Some("\\boxed{1}".into()),
            stop: "answer".into(),
            usage: Usage::default(),
            seconds: 1.5,
        }
    }

    #[test]
    fn runs_come_back_in_order_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let mut opened = RunLog::open(&path).unwrap();
        assert!(opened.runs.is_empty());
        opened.log.append(&teacher_run("a")).unwrap();
        opened.log.append(&teacher_run("b")).unwrap();
        drop(opened);
        let again = RunLog::open(&path).unwrap();
        let ids: Vec<&str> = again.runs.iter().map(|r| r.run.task_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(again.runs[0], teacher_run("a"));
        assert_eq!(again.cut_bytes, 0);
    }

    #[test]
    fn a_line_cut_by_a_killed_process_is_dropped_and_the_log_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let mut opened = RunLog::open(&path).unwrap();
        opened.log.append(&teacher_run("a")).unwrap();
        drop(opened);
        let whole = serde_json::to_string(&teacher_run("b")).unwrap();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&whole.as_bytes()[..whole.len() / 2])
            .unwrap();
        drop(file);
        let mut again = RunLog::open(&path).unwrap();
        assert_eq!(again.runs.len(), 1);
        assert_eq!(again.cut_bytes, (whole.len() / 2) as u64);
        again.log.append(&teacher_run("c")).unwrap();
        drop(again);
        let ids: Vec<String> = RunLog::open(&path)
            .unwrap()
            .runs
            .into_iter()
            .map(|r| r.run.task_id)
            .collect();
        assert_eq!(ids, ["a", "c"]);
    }

    #[test]
    fn a_bad_line_in_the_middle_is_refused_and_the_file_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let good = serde_json::to_string(&teacher_run("a")).unwrap();
        let text = format!("{good}\nnot json\n{good}\n");
        std::fs::write(&path, &text).unwrap();
        let Err(LogError::Corrupt { line, .. }) = RunLog::open(&path) else {
            panic!("a corrupt log was accepted");
        };
        assert_eq!(line, 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
