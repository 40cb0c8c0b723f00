//! Dynamic sampling: which prompts a step draws, and when.
//!
//! Prompts are drawn in the seeded order and a group of rollouts sampled for each. A group whose
//! rewards are all equal carries no signal and is dropped, and another prompt is drawn in its
//! place, until `batch_prompts` groups are kept or the cap on draws is reached. Groups run
//! `parallel_groups` at a time over the batch's sequences.
//!
//! Each rollout is scored as it ends, so a group's fate shows before its last rollout ends:
//! once half its rollouts (two at least) have ended with one reward between them, it is
//! *doubtful*, and its place is given to the next prompt at once rather than when its slowest
//! rollout ends. Without that, the replacement of a dropped group starts late and decodes
//! nearly alone at the end of the step, where the batch is narrow and each token costs several
//! times what it costs in a full one (docs/BENCHMARKS.md, "Drawing in place of a doubtful
//! group"). A doubtful group that ends with signal after all is kept too, so a step may train
//! on more groups than `batch_prompts`: nothing with signal is thrown away.

use super::rollout::{self, Rollout, RolloutSetup};
use super::{RlEvent, RlOptions, RlProgress, Scored, StepInputs, task_at};
use crate::{Result, TrainError};
use catena_engine::llama::BatchedSession;
use catena_eval::EvalTask;
use catena_runner::run_fed;
use std::collections::HashMap;
use std::time::Instant;

/// The groups a step drew, and what they cost.
#[derive(Default)]
pub(super) struct Drawn {
    pub sampled: usize,
    pub dropped: usize,
    pub kept: Vec<Scored>,
    pub rewards: Vec<f64>,
    pub solved: usize,
    pub lengths: Vec<usize>,
    pub rollout_seconds: f64,
    pub scoring_seconds: f64,
}

/// A group under way: its task, and each rollout with its reward once it has ended.
struct OpenGroup {
    task: usize,
    ended: Vec<Option<(Rollout, f64)>>,
}

impl OpenGroup {
    /// Half its rollouts, and two at least, have ended, all with the same reward: the group may
    /// well be dropped. (Three in four gave back most of the gain, three in eight drew more
    /// replacements for groups that kept their signal: docs/BENCHMARKS.md, "Drawing in place of
    /// a doubtful group".)
    fn doubtful(&self) -> bool {
        let mut rewards = self.ended.iter().flatten().map(|(_, reward)| *reward);
        let Some(first) = rewards.next() else {
            return false;
        };
        let (ended, same) = rewards.fold((1, true), |(n, same), r| (n + 1, same && r == first));
        same && first.is_finite() && ended >= 2 && 2 * ended >= self.ended.len()
    }
}

/// The step's groups under way and kept so far, by draw index.
#[derive(Default)]
struct Groups {
    open: HashMap<usize, OpenGroup>,
    kept: Vec<(usize, Vec<Scored>)>,
}

impl Groups {
    fn doubtful(&self) -> usize {
        self.open.values().filter(|g| g.doubtful()).count()
    }
}

/// One rollout to sample: rollout `g` of the group drawn `index`-th, for task `task`.
struct RolloutJob {
    index: usize,
    task: usize,
    seed: u32,
    g: usize,
}

/// Draws and samples groups (see the module's doc) over `sessions`; the kept groups are returned
/// in the order drawn.
pub(super) fn draw_groups(
    run: &StepInputs<'_>,
    setup: &RolloutSetup<'_>,
    sessions: Vec<BatchedSession<'_>>,
    progress: &mut RlProgress,
    on_event: &mut dyn FnMut(&RlEvent),
) -> Result<Drawn> {
    let step = progress.step + 1;
    let started = Instant::now();
    let mut drawn = Drawn::default();
    let mut groups = Groups::default();
    let first = draw(run.options, run.tasks, progress, &mut drawn, &mut groups);
    run_fed(
        sessions,
        first,
        |session, job| {
            rollout::rollout(setup, session, &run.tasks[job.task], job.seed, job.g).map(Some)
        },
        |job, rollout| {
            let Some(open) = groups.open.get_mut(&job.index) else {
                return Err(TrainError::Stopped(format!(
                    "a rollout of group {} came back after its group was scored",
                    job.index
                )));
            };
            let reward = score_rollout(run, &run.tasks[open.task], &rollout, &mut drawn);
            open.ended[job.g] = Some((rollout, reward));
            if open.ended.iter().all(Option::is_some)
                && let Some(open) = groups.open.remove(&job.index)
            {
                end_group(
                    step,
                    job.index,
                    open,
                    run,
                    &mut drawn,
                    &mut groups,
                    on_event,
                );
            }
            Ok(draw(
                run.options,
                run.tasks,
                progress,
                &mut drawn,
                &mut groups,
            ))
        },
    )?;
    groups.kept.sort_by_key(|(index, _)| *index);
    drawn.kept = groups.kept.into_iter().flat_map(|(_, s)| s).collect();
    // Scoring ran on this thread while rollouts went on; it is counted on its own.
    drawn.rollout_seconds = (started.elapsed().as_secs_f64() - drawn.scoring_seconds).max(0.0);
    Ok(drawn)
}

/// The jobs of the groups to draw now (as many as [`groups_to_draw`] says), in the seeded
/// order of prompts.
fn draw(
    options: &RlOptions,
    tasks: &[EvalTask],
    progress: &mut RlProgress,
    drawn: &mut Drawn,
    groups: &mut Groups,
) -> Vec<RolloutJob> {
    let doubtful = groups.doubtful();
    let under_way = groups.open.len() - doubtful;
    let count = groups_to_draw(options, groups.kept.len(), under_way, drawn.sampled);
    if count > 0 && doubtful > 0 {
        tracing::debug!(
            groups = count,
            doubtful,
            "drawn in place of doubtful groups"
        );
    }
    let mut jobs = Vec::with_capacity(count * options.group);
    for _ in 0..count {
        let index = progress.drawn;
        let task = task_at(index, tasks.len(), options.seed);
        let seed = (options.seed as u32)
            .wrapping_add((index as u32).wrapping_mul(7919))
            .wrapping_mul(31);
        progress.drawn += 1;
        drawn.sampled += 1;
        let ended = (0..options.group).map(|_| None).collect();
        groups.open.insert(index, OpenGroup { task, ended });
        jobs.extend((0..options.group).map(|g| RolloutJob {
            index,
            task,
            seed,
            g,
        }));
    }
    jobs
}

/// How many groups to draw now, with `kept` groups kept, `under_way` under way and not
/// doubtful, and `sampled` drawn this step: never more than `parallel_groups` under way, than
/// could still be needed if every group under way is kept, or than the cap on draws leaves.
fn groups_to_draw(options: &RlOptions, kept: usize, under_way: usize, sampled: usize) -> usize {
    let max_draws = options.batch_prompts * options.max_draw_factor.max(1);
    let needed = options.batch_prompts.saturating_sub(kept + under_way);
    let room = options.parallel_groups.max(1).saturating_sub(under_way);
    needed.min(room).min(max_draws.saturating_sub(sampled))
}

/// Group `index`, every rollout ended: kept with its advantages if its rewards differ, dropped
/// otherwise; the outcome is reported.
fn end_group(
    step: usize,
    index: usize,
    open: OpenGroup,
    run: &StepInputs<'_>,
    drawn: &mut Drawn,
    groups: &mut Groups,
    on_event: &mut dyn FnMut(&RlEvent),
) {
    let (rollouts, rewards): (Vec<Rollout>, Vec<f64>) = open.ended.into_iter().flatten().unzip();
    let advantages = super::group_advantages(&rewards);
    on_event(&RlEvent::Group {
        step,
        task: run.tasks[open.task].id.clone(),
        rewards,
        kept: advantages.is_some(),
    });
    match advantages {
        Some(advantages) => groups.kept.push((
            index,
            rollouts
                .into_iter()
                .zip(advantages)
                .map(|(rollout, advantage)| Scored { rollout, advantage })
                .collect(),
        )),
        None => drawn.dropped += 1,
    }
}

/// The reward of one rollout (with the overlong penalty when the run shapes them), counted into
/// the step's totals.
fn score_rollout(run: &StepInputs<'_>, task: &EvalTask, r: &Rollout, drawn: &mut Drawn) -> f64 {
    let options = run.options;
    let t_score = Instant::now();
    let score = catena_eval::score_run(task, r.answer.as_deref(), &r.trajectory, run.scoring);
    drawn.solved += usize::from(score.solved);
    let mut reward = score.reward;
    if options.overlong_shaping {
        reward += catena_eval::reward::overlong_penalty(r.response_tokens(), options.max_tokens);
    }
    drawn.lengths.push(r.response_tokens());
    drawn.rewards.push(reward);
    drawn.scoring_seconds += t_score.elapsed().as_secs_f64();
    reward
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn groups_are_drawn_only_while_they_could_be_needed() {
        let mut options = RlOptions::new(PathBuf::new(), PathBuf::new(), PathBuf::new());
        options.batch_prompts = 4;
        options.parallel_groups = 2;
        options.max_draw_factor = 3;
        // (kept, under way, drawn) -> groups to draw
        for (kept, under_way, sampled, expected) in [
            (0, 0, 0, 2),
            (0, 1, 1, 1),
            (0, 2, 2, 0),
            (3, 0, 5, 1),
            (2, 2, 6, 0),
            (3, 1, 6, 0),
            (1, 0, 11, 1),
            (1, 0, 12, 0),
            // More kept than the batch (a doubtful group kept after all): none.
            (5, 0, 6, 0),
        ] {
            assert_eq!(
                groups_to_draw(&options, kept, under_way, sampled),
                expected,
                "kept {kept}, under way {under_way}, drawn {sampled}"
            );
        }
        options.parallel_groups = 0;
        assert_eq!(groups_to_draw(&options, 0, 0, 0), 1);
    }

    fn rollout() -> Rollout {
        Rollout {
            tokens: Vec::new(),
            trained: Vec::new(),
            rollout_logprobs: Vec::new(),
            answer: None,
            trajectory: String::new(),
            tool_calls: 0,
            stop: String::new(),
        }
    }

    fn group(ended: &[Option<f64>]) -> OpenGroup {
        OpenGroup {
            task: 0,
            ended: ended.iter().map(|r| r.map(|r| (rollout(), r))).collect(),
        }
    }

    #[test]
    fn a_doubtful_group_gives_its_place_to_the_next_prompt_once() {
        let mut options = RlOptions::new(PathBuf::new(), PathBuf::new(), PathBuf::new());
        options.group = 4;
        options.batch_prompts = 2;
        options.parallel_groups = 2;
        let tasks: Vec<EvalTask> = (0..5)
            .map(|i| {
                let task =
                    serde_json::json!({"id": format!("t{i}"), "question": "?", "answer": "1"});
                serde_json::from_value(task).unwrap()
            })
            .collect();
        let mut progress = RlProgress {
            step: 0,
            fingerprint: String::new(),
            drawn: 0,
            history: Vec::new(),
        };
        let (mut drawn, mut groups) = (Drawn::default(), Groups::default());
        let mut draw_now = |groups: &mut Groups| {
            let jobs = draw(&options, &tasks, &mut progress, &mut drawn, groups);
            jobs.iter()
                .map(|job| (job.index, job.g))
                .collect::<Vec<_>>()
        };
        let first = draw_now(&mut groups);
        assert_eq!(first.len(), 8, "two groups of four");
        assert!(draw_now(&mut groups).is_empty());
        // Two of group 0's four rollouts end alike: group 2 is drawn in its place, once.
        for g in 0..3 {
            groups.open.get_mut(&0).unwrap().ended[g] = Some((rollout(), 0.0));
            let expected = if g != 1 {
                vec![]
            } else {
                vec![(2, 0), (2, 1), (2, 2), (2, 3)]
            };
            assert_eq!(draw_now(&mut groups), expected, "{} ended", g + 1);
        }
        assert!(draw_now(&mut groups).is_empty());
        // A different reward ends the doubt; the group under way for it stays.
        groups.open.get_mut(&0).unwrap().ended[3] = Some((rollout(), 1.0));
        assert!(!groups.open[&0].doubtful());
        assert!(draw_now(&mut groups).is_empty());
        assert_eq!(groups.open.len(), 3);
    }

    #[test]
    fn a_group_is_doubtful_once_half_its_rollouts_ended_alike() {
        let (one, zero) = (Some(1.0), Some(0.0));
        assert!(!group(&[None; 8]).doubtful());
        assert!(!group(&[one, one, one, None, None, None, None, None]).doubtful());
        assert!(group(&[one, one, one, one, None, None, None, None]).doubtful());
        assert!(group(&[None, zero, None, zero, zero, None, zero, None]).doubtful());
        assert!(!group(&[one, zero, one, one, one, one, None, None]).doubtful());
        // One ended rollout is no evidence, even in a group of two.
        assert!(!group(&[one, None]).doubtful());
        assert!(group(&[one, one]).doubtful());
        assert!(!group(&[Some(f64::NAN), Some(f64::NAN), Some(f64::NAN), None]).doubtful());
    }
}
