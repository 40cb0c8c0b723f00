//! Which groups a step draws, and when: the bookkeeping of dynamic sampling over batched
//! sequences (docs/TRAINING.md, "Agentic RL", step 2). Generic over the rollout so that it is
//! tested without a model.

use super::{RlOptions, task_at};
use crate::TrainError;
use std::collections::HashMap;

/// One rollout to sample: rollout `g` of the group drawn `index`-th, for task `task`.
pub(super) struct RolloutJob {
    pub index: usize,
    pub task: usize,
    pub seed: u32,
    pub g: usize,
}

/// The groups of one step under way over `lanes` sequences.
pub(super) struct GroupDraws<'a, R> {
    options: &'a RlOptions,
    tasks: usize,
    lanes: usize,
    /// By draw index: the task and the rollouts finished so far.
    open: HashMap<usize, (usize, Vec<Option<R>>)>,
    sampled: usize,
}

impl<'a, R> GroupDraws<'a, R> {
    pub fn new(options: &'a RlOptions, tasks: usize, lanes: usize) -> GroupDraws<'a, R> {
        GroupDraws {
            options,
            tasks,
            lanes,
            open: HashMap::new(),
            sampled: 0,
        }
    }

    /// Groups drawn this step.
    pub fn sampled(&self) -> usize {
        self.sampled
    }

    /// The rollouts of the groups to draw now, with `kept` groups kept: enough to give every
    /// sequence with nothing queued for it a rollout, within what could still be needed.
    /// `position` is the run's place in the seeded task order, advanced past each draw.
    pub fn draw(&mut self, kept: usize, position: &mut usize) -> Vec<RolloutJob> {
        let options = self.options;
        let group = options.group;
        // Rollouts queued or under way: a sequence beyond these has nothing to do.
        let unfinished: usize = self
            .open
            .values()
            .map(|(_, rollouts)| rollouts.iter().filter(|r| r.is_none()).count())
            .sum();
        let idle = self.lanes.saturating_sub(unfinished);
        let count = groups_to_draw(options, kept, self.open.len(), self.sampled, idle);
        let mut jobs = Vec::with_capacity(count * group);
        for _ in 0..count {
            let index = *position;
            let task = task_at(index, self.tasks, options.seed);
            let seed = (options.seed as u32)
                .wrapping_add((index as u32).wrapping_mul(7919))
                .wrapping_mul(31);
            *position += 1;
            self.sampled += 1;
            self.open.insert(
                index,
                (task, std::iter::repeat_with(|| None).take(group).collect()),
            );
            jobs.extend((0..group).map(|g| RolloutJob {
                index,
                task,
                seed,
                g,
            }));
        }
        jobs
    }

    /// Records `job`'s rollout; once its group's are all in, the group's task and rollouts.
    pub fn finish(
        &mut self,
        job: &RolloutJob,
        rollout: R,
    ) -> Result<Option<(usize, Vec<R>)>, TrainError> {
        let Some((_, rollouts)) = self.open.get_mut(&job.index) else {
            return Err(TrainError::Stopped(format!(
                "a rollout of group {} came back after its group was scored",
                job.index
            )));
        };
        rollouts[job.g] = Some(rollout);
        if rollouts.iter().any(Option::is_none) {
            return Ok(None);
        }
        Ok(self
            .open
            .remove(&job.index)
            .map(|(task, rollouts)| (task, rollouts.into_iter().flatten().collect())))
    }
}

/// How many groups to draw now, with `kept` groups kept, `open` under way, `sampled` drawn this
/// step and `idle` sequences with no rollout queued for them: enough to give every idle one a
/// rollout (a group's last rollouts wait in the queue for a sequence to free up), but never
/// more than could still be needed or than the cap on draws leaves.
fn groups_to_draw(
    options: &RlOptions,
    kept: usize,
    open: usize,
    sampled: usize,
    idle: usize,
) -> usize {
    let max_draws = options.batch_prompts * options.max_draw_factor.max(1);
    let needed = options.batch_prompts.saturating_sub(kept + open);
    let room = idle.div_ceil(options.group.max(1));
    needed.min(room).min(max_draws.saturating_sub(sampled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn options() -> RlOptions {
        let mut options = RlOptions::new(PathBuf::new(), PathBuf::new(), PathBuf::new());
        options.batch_prompts = 4;
        options.group = 8;
        options.max_draw_factor = 3;
        options
    }

    #[test]
    fn groups_are_drawn_for_idle_sequences_only_while_they_could_be_needed() {
        let options = options();
        // (kept, under way, drawn, idle sequences) -> groups to draw
        for (kept, open, sampled, idle, expected) in [
            (0, 0, 0, 16, 2),
            (0, 0, 0, 17, 3),
            (0, 1, 1, 8, 1),
            (0, 2, 2, 0, 0),
            (0, 2, 2, 1, 1),
            (0, 3, 3, 16, 1),
            (3, 0, 5, 16, 1),
            (2, 2, 6, 3, 0),
            (3, 1, 6, 9, 0),
            (1, 0, 11, 16, 1),
            (1, 0, 12, 16, 0),
        ] {
            assert_eq!(
                groups_to_draw(&options, kept, open, sampled, idle),
                expected,
                "kept {kept}, under way {open}, drawn {sampled}, idle {idle}"
            );
        }
    }

    #[test]
    fn a_sequence_freed_by_one_rollout_starts_the_next_group() {
        let options = options();
        let mut draws: GroupDraws<'_, usize> = GroupDraws::new(&options, 10, 16);
        let mut position = 5;
        let first = draws.draw(0, &mut position);
        assert_eq!(
            first.len(),
            16,
            "two groups of eight fill sixteen sequences"
        );
        assert_eq!((position, draws.sampled()), (7, 2));
        assert_eq!(draws.draw(0, &mut position).len(), 0, "no sequence is idle");
        // One rollout of the first group ends: its sequence would sit idle until the group's
        // longest ended, so the next group is drawn now, seven of its rollouts queued.
        assert!(draws.finish(&first[0], 0).unwrap().is_none());
        let third = draws.draw(0, &mut position);
        assert_eq!(third.len(), 8);
        assert!(third.iter().all(|job| job.index == 7));
        // Six more of the first group end: the third group's queued rollouts take their
        // sequences, and none is idle.
        for job in &first[1..7] {
            assert!(draws.finish(job, job.g).unwrap().is_none());
        }
        assert_eq!(draws.draw(0, &mut position).len(), 0);
        for job in &third[..2] {
            assert!(draws.finish(job, 0).unwrap().is_none());
        }
        assert_eq!(draws.draw(0, &mut position).len(), 8, "a fourth group");
        // Four groups under way could be enough: no more, though a sequence frees up.
        assert!(draws.finish(&third[2], 0).unwrap().is_none());
        assert_eq!(draws.draw(0, &mut position).len(), 0);
        // The first group's last rollout: the group comes back whole, in rollout order.
        let (task, rollouts) = draws.finish(&first[7], 7).unwrap().unwrap();
        assert_eq!(task, first[0].task);
        assert_eq!(rollouts, (0..8).collect::<Vec<_>>());
        // It carried no signal (none kept), so a fifth group could be needed, but every
        // sequence has a rollout queued.
        assert_eq!(draws.draw(0, &mut position).len(), 0);
        // The second group ends and is kept: a sequence is idle, and one more could be needed.
        for job in &first[8..15] {
            assert!(draws.finish(job, job.g).unwrap().is_none());
        }
        assert!(draws.finish(&first[15], 7).unwrap().is_some());
        assert_eq!(draws.draw(1, &mut position).len(), 8);
        assert_eq!((position, draws.sampled()), (10, 5));
        assert!(draws.finish(&first[0], 0).is_err(), "its group was scored");
    }
}
