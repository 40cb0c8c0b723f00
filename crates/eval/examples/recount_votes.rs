//! Recounts recorded votes by the vote's rule and by the rule before it read what the chains'
//! programs printed (the same ballots with their outputs left out), so a change to the vote is
//! measured on chains already run rather than on new ones:
//!
//! ```text
//! cargo run --release -p catena-eval --example recount_votes -- OUT_DIR... [--expected A RUN.json...]
//! ```
//!
//! An `OUT_DIR` is a `catena eval --vote K --out OUT_DIR` folder of math tasks (its
//! `report.json` and `runs.jsonl`); a `RUN.json` is what `catena run --samples K --json` printed,
//! counted against the expected answer `A`. Prints maj@K by each rule, per folder and per set of
//! runs. With `--loops-abstain` first, "now" is a variant: a chain a loop stopped (stop reason
//! `repetition`) is read without its printed outputs, so it votes only as any chain cut short.

use anyhow::{Context, Result, bail};
use catena_eval::reward::math_equivalent;
use catena_eval::vote::{Ballot, Equivalence, majority_rate, tally};
use catena_eval::{EvalTask, Report, TaskKind};
use catena_protocol::{Tag, parse_all, printed_output};
use catena_run_events::StopReason;
use std::collections::HashMap;
use std::path::Path;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut expected: Option<String> = None;
    let mut loops_abstain = false;
    let (mut runs, mut right_before, mut right_now) = (0, 0, 0);
    while let Some(arg) = args.next() {
        if arg == "--loops-abstain" {
            loops_abstain = true;
        } else if arg == "--expected" {
            expected = Some(args.next().context("--expected needs an answer")?);
        } else if arg.ends_with(".json") {
            let expected = expected
                .as_deref()
                .context("a RUN.json needs --expected first")?;
            let (before, now) = recount_samples(Path::new(&arg), expected, loops_abstain)?;
            runs += 1;
            right_before += usize::from(before);
            right_now += usize::from(now);
        } else {
            let (tasks, before, now) = recount_eval(Path::new(&arg), loops_abstain)?;
            println!("{arg}: {tasks} tasks, maj@K {before:.3} before, {now:.3} now");
        }
    }
    if runs > 0 {
        println!("{runs} runs with --samples: right {right_before} before, {right_now} now");
    }
    Ok(())
}

/// maj@K of an evaluation's folder before and now.
fn recount_eval(dir: &Path, loops_abstain: bool) -> Result<(usize, f64, f64)> {
    let report: Report = serde_json::from_str(&read(&dir.join("report.json"))?)?;
    let mut trajectories: HashMap<(String, usize), String> = HashMap::new();
    for line in read(&dir.join("runs.jsonl"))?.lines() {
        let run: serde_json::Value = serde_json::from_str(line)?;
        let (Some(id), Some(sample), Some(trajectory)) = (
            run["id"].as_str(),
            run["sample"].as_u64(),
            run["trajectory"].as_str(),
        ) else {
            bail!("a line of runs.jsonl without id, sample or trajectory");
        };
        trajectories.insert((id.to_string(), sample as usize), trajectory.to_string());
    }
    let mut tasks: Vec<EvalTask> = Vec::new();
    for result in &report.results {
        if !tasks.iter().any(|t| t.id == result.id) {
            tasks.push(EvalTask {
                id: result.id.clone(),
                question: String::new(),
                answer: result.expected.clone(),
                family: None,
                kind: Some(TaskKind::Math),
                tests: None,
            });
        }
    }
    // Now: what the report recorded the runtime printed, or for an older report, what its
    // trajectories show.
    let mut now = report.results.clone();
    for result in &mut now {
        let key = (result.id.clone(), result.sample);
        if loops_abstain && result.stop == StopReason::Repetition.as_str() {
            result.printed.clear();
        } else if result.printed.is_empty() {
            result.printed = trajectories
                .get(&key)
                .map_or_else(Vec::new, |t| printed_outputs(t));
        }
    }
    let mut before = report.results.clone();
    for result in &mut before {
        result.printed.clear();
    }
    // Task by task, naming those whose vote changed.
    let (mut right_before, mut right_now) = (0.0, 0.0);
    for task in &tasks {
        let one = std::slice::from_ref(task);
        let (was, is) = (
            majority_rate(one, &before, None),
            majority_rate(one, &now, None),
        );
        if was != is {
            let verdict = |rate: f64| if rate > 0.0 { "right" } else { "wrong" };
            println!(
                "  {}: {} before, {} now",
                task.id,
                verdict(was),
                verdict(is)
            );
        }
        right_before += was;
        right_now += is;
    }
    let count = tasks.len().max(1) as f64;
    let (before, now) = (right_before / count, right_now / count);
    Ok((tasks.len(), before, now))
}

/// Whether the vote of one `catena run --samples K --json` output was right, before and now.
fn recount_samples(path: &Path, expected: &str, loops_abstain: bool) -> Result<(bool, bool)> {
    let mut ballots = Vec::new();
    for line in read(path)?.lines() {
        let value: serde_json::Value = serde_json::from_str(line)?;
        if value["type"] != "sample" {
            continue;
        }
        let summary = &value["summary"];
        let stop = summary["stop_reason"]
            .as_str()
            .and_then(StopReason::from_name);
        ballots.push(Ballot {
            answer: summary["answer"].as_str().map(str::to_string),
            mean_logprob: value["mean_logprob"].as_f64().unwrap_or(f64::NEG_INFINITY),
            cut_short: stop.is_some_and(StopReason::cut_short),
            printed: match summary["printed"].as_array() {
                _ if loops_abstain && stop == Some(StopReason::Repetition) => Vec::new(),
                Some(recorded) => recorded
                    .iter()
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect(),
                None => printed_outputs(summary["trajectory"].as_str().unwrap_or("")),
            },
        });
    }
    let right = |ballots: &[Ballot]| {
        tally(ballots, &Equivalence::Math)
            .winner()
            .is_some_and(|g| math_equivalent(&g.answer, expected))
    };
    let now = right(&ballots);
    for ballot in &mut ballots {
        ballot.printed.clear();
    }
    Ok((right(&ballots), now))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// What a recorded chain's programs printed, for records without `RunSummary::printed` or the
/// report's `printed` (older ones; both are empty, too, when no program printed anything):
/// each observation right after a closed `<code>` block, the runtime's (a call's closing tag is
/// a stop string). Chains generated under the grammar, as all recorded votes were, cannot write
/// an observation themselves; one generated with `--free` could, so new records are read from
/// what the runtime kept.
fn printed_outputs(trajectory: &str) -> Vec<String> {
    parse_all(trajectory)
        .0
        .windows(2)
        .filter(|pair| pair[0].tag == Tag::Code && pair[0].closed)
        .filter(|pair| pair[1].tag == Tag::Observation)
        .filter_map(|pair| printed_output(pair[1].content.trim()))
        .map(str::to_string)
        .collect()
}
