//! Many runs over many sequences: one thread per lane (a batched sequence, a chat client of a
//! server), each lane taking the next run as it finishes one, so a lane whose run ends early does
//! not wait for the others (continuous batching, docs/ARCHITECTURE.md "Many sequences in one
//! context").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

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
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let (finished, ended) = mpsc::channel::<(usize, Result<T, E>)>();
    std::thread::scope(|scope| {
        for mut lane in lanes {
            let finished = finished.clone();
            let (next, failed, work) = (&next, &failed, &work);
            scope.spawn(move || {
                while !failed.load(Ordering::SeqCst) {
                    let job = next.fetch_add(1, Ordering::SeqCst);
                    if job >= count {
                        break;
                    }
                    let result = match work(&mut lane, job) {
                        Ok(Some(result)) => Ok(result),
                        Ok(None) => break,
                        Err(e) => {
                            failed.store(true, Ordering::SeqCst);
                            Err(e)
                        }
                    };
                    if finished.send((job, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(finished);
        let mut first_error = None;
        for (job, result) in ended {
            if let Err(e) = result.and_then(|result| keep(job, result)) {
                failed.store(true, Ordering::SeqCst);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
