//! Many runs over many sequences: one thread per lane (a batched sequence, a chat client of a
//! server), each lane taking the next run as it finishes one, so a lane whose run ends early does
//! not wait for the others (continuous batching, docs/ARCHITECTURE.md "Many sequences in one
//! context").

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, PoisonError};

/// Runs jobs `0..count` over `lanes`. `work(lane, job)` runs one job; `Ok(None)` says the lane
/// was stopped (a cancel) and takes no more jobs. `keep(job, result)` gets each result on the
/// caller's thread in the order they end. After an error, from `work` or from `keep`, no new job
/// starts; the jobs under way finish and are kept, and the first error is returned.
pub fn run_queue<L, T, E>(
    lanes: Vec<L>,
    count: usize,
    work: impl Fn(&mut L, usize) -> Result<Option<T>, E> + Sync,
    mut keep: impl FnMut(usize, T) -> Result<(), E>,
) -> Result<(), E>
where
    L: Send,
    T: Send,
    E: Send,
{
    run_fed(
        lanes,
        (0..count).collect(),
        |lane, &job| work(lane, job),
        |job, result| keep(job, result).map(|()| Vec::new()),
    )
}

/// [`run_queue`] where what runs next depends on what ended: `keep(job, result)` returns jobs to
/// add behind those queued (RL draws another group of rollouts when one carried no signal).
/// Jobs start in the order queued; the run ends when none is queued or under way.
pub fn run_fed<L, J, T, E>(
    lanes: Vec<L>,
    jobs: Vec<J>,
    work: impl Fn(&mut L, &J) -> Result<Option<T>, E> + Sync,
    mut keep: impl FnMut(J, T) -> Result<Vec<J>, E>,
) -> Result<(), E>
where
    L: Send,
    J: Send,
    T: Send,
    E: Send,
{
    let mut outstanding = jobs.len();
    let board = JobBoard::new(jobs);
    // A lane sends every job it took back, its result `None` when the lane was stopped.
    let (finished, ended) = mpsc::channel::<(J, Result<Option<T>, E>)>();
    std::thread::scope(|scope| {
        for mut lane in lanes {
            let finished = finished.clone();
            let (board, work) = (&board, &work);
            scope.spawn(move || {
                while let Some(job) = board.take() {
                    let result = work(&mut lane, &job);
                    let go_on = matches!(result, Ok(Some(_)));
                    if result.is_err() {
                        board.close();
                    }
                    if finished.send((job, result)).is_err() || !go_on {
                        break;
                    }
                }
            });
        }
        drop(finished);
        if outstanding == 0 {
            board.close();
        }
        let mut first_error = None;
        // Ends when every lane has ended: after the board closed, or when all were stopped.
        for (job, result) in ended {
            outstanding -= 1;
            let kept = match result {
                Ok(Some(result)) => keep(job, result),
                Ok(None) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            match kept {
                Ok(more) if first_error.is_none() => {
                    outstanding += more.len();
                    board.add(more);
                }
                Ok(_) => {}
                Err(e) => {
                    board.close();
                    first_error.get_or_insert(e);
                }
            }
            if outstanding == 0 {
                board.close();
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// The queued jobs the lanes take from, and whether more can come.
struct JobBoard<J> {
    state: Mutex<(VecDeque<J>, bool)>,
    changed: Condvar,
}

impl<J> JobBoard<J> {
    fn new(jobs: Vec<J>) -> JobBoard<J> {
        JobBoard {
            state: Mutex::new((jobs.into(), false)),
            changed: Condvar::new(),
        }
    }

    /// The next job, waiting for one while the board is open; `None` once it is closed.
    fn take(&self) -> Option<J> {
        // A lane that panicked holding the lock left the queue itself intact.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let (queue, closed) = &mut *state;
            if *closed {
                return None;
            }
            if let Some(job) = queue.pop_front() {
                return Some(job);
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn add(&self, jobs: Vec<J>) {
        if jobs.is_empty() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.extend(jobs);
        self.changed.notify_all();
    }

    /// No job starts after this; lanes waiting for one end.
    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn every_job_runs_once_and_is_kept() {
        let mut kept = Vec::new();
        run_queue(
            vec![0usize; 3],
            10,
            |runs, job| {
                *runs += 1;
                Ok::<_, String>(Some(job * 2))
            },
            |job, result| {
                kept.push((job, result));
                Ok(())
            },
        )
        .unwrap();
        kept.sort();
        assert_eq!(kept, (0..10).map(|j| (j, j * 2)).collect::<Vec<_>>());
    }

    #[test]
    fn an_error_stops_new_jobs_and_is_returned() {
        let started = AtomicUsize::new(0);
        let mut kept = 0;
        let err = run_queue(
            vec![(); 1],
            100,
            |_, job| {
                started.fetch_add(1, Ordering::SeqCst);
                if job == 3 {
                    Err(format!("job {job} failed"))
                } else {
                    Ok(Some(job))
                }
            },
            |_, _| {
                kept += 1;
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(err, "job 3 failed");
        // One lane: jobs 0, 1, 2 kept, job 3 failed, nothing after it started.
        assert_eq!(started.load(Ordering::SeqCst), 4);
        assert_eq!(kept, 3);
    }

    #[test]
    fn a_failing_keep_stops_the_queue_and_a_stopped_lane_takes_no_more() {
        let err = run_queue(
            vec![(); 2],
            50,
            |_, job| Ok(Some(job)),
            |_, _| Err("disk full".to_string()),
        )
        .unwrap_err();
        assert_eq!(err, "disk full");
        let started = AtomicUsize::new(0);
        run_queue(
            vec![(); 2],
            50,
            |_, _| {
                started.fetch_add(1, Ordering::SeqCst);
                Ok::<Option<()>, String>(None)
            },
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn kept_results_can_add_jobs_and_the_run_ends_when_none_is_left() {
        // Each job n < 20 adds job n + 10; the jobs that run are 0..30, each once.
        let mut kept = Vec::new();
        run_fed(
            vec![(); 3],
            (0..10).collect(),
            |_, &job: &usize| Ok::<_, String>(Some(job)),
            |job, result| {
                kept.push(result);
                Ok(if job < 20 { vec![job + 10] } else { Vec::new() })
            },
        )
        .unwrap();
        kept.sort();
        assert_eq!(kept, (0..30).collect::<Vec<_>>());
    }

    #[test]
    fn a_stopped_lane_does_not_keep_the_others_waiting() {
        // Lane 0 stops at its first job; lane 1 (which waits until it has) runs every other
        // job, and the run ends.
        let stopped = AtomicBool::new(false);
        let ran = AtomicUsize::new(0);
        let mut kept = 0;
        run_fed(
            vec![true, false],
            (0..8).collect(),
            |stops: &mut bool, _: &usize| {
                if *stops {
                    stopped.store(true, Ordering::SeqCst);
                    return Ok::<_, String>(None);
                }
                while !stopped.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(Some(()))
            },
            |_, ()| {
                kept += 1;
                Ok(Vec::new())
            },
        )
        .unwrap();
        assert_eq!(kept, ran.load(Ordering::SeqCst));
        assert_eq!(kept, 7);
    }
}
