//! `catena run --samples N`: N chains of one task decoded together in one context (the batched
//! engine), each with its own seed, and their answers put to a vote (`catena_eval::vote`). The
//! answer printed is the winning group's; `--json` gives every chain and the tally.

use anyhow::Result;
use catena_agent::RunSummary;
use catena_engine::llama::LlamaEngine;
use catena_engine_api::SessionOptions;
use catena_eval::vote::{ChainAnswer, Tally, vote_on_chains};
use catena_protocol::AnswerFormat;
use catena_runner::{Engine, RunPlan, TaskRun, Update, run_queue, run_task};
use catena_sandbox::Sandbox;
use catena_store::Recorder;
use std::io::Write;

/// One chain of the vote.
pub struct Sample {
    /// 1-based, in seed order.
    pub sample: usize,
    pub seed: u32,
    /// Every block opened and closed in order, and an `<answer>` last.
    pub valid: bool,
    /// The stored run, when the run was saved.
    pub run_id: Option<String>,
    pub summary: RunSummary,
}

/// Runs `samples` chains of `task` on `samples` sequences of `engine`: seeds `seed`, `seed+1`,
/// ... `record` opens each chain's record in the store (`None`: not saved). `done` hears of
/// each chain as it ends.
pub fn run_samples<'r>(
    engine: &LlamaEngine,
    options: &SessionOptions,
    plan: &RunPlan<'_>,
    task: &TaskRun<'_>,
    samples: usize,
    record: &(dyn Fn(&TaskRun<'_>) -> Option<Recorder<'r>> + Sync),
    done: &mut dyn FnMut(&Sample),
) -> Result<Vec<Sample>> {
    let options = SessionOptions {
        // The tie-break reads each sampled token's log-probability.
        logprobs: true,
        ..options.clone()
    };
    let mut finished: Vec<Sample> = Vec::with_capacity(samples);
    let boxed = plan.profile.answer == AnswerFormat::Boxed;
    engine.with_sequences(&options, samples, |sessions| {
        run_queue(
            sessions,
            samples,
            |session, index| {
                let mut sampling = task.sampling;
                sampling.seed = task.sampling.seed.wrapping_add(index as u32);
                let run = TaskRun { sampling, ..*task };
                let mut record = record(&run);
                let outcome = run_task(
                    Engine::Chain(session),
                    plan,
                    &run,
                    record.as_mut(),
                    &mut |_: Update<'_>| {},
                )?;
                let summary = outcome.summary;
                Ok::<_, anyhow::Error>(Some(Sample {
                    sample: index + 1,
                    seed: sampling.seed,
                    valid: catena_eval::well_formed(&summary.trajectory, boxed),
                    run_id: record.map(|r| r.run_id().to_string()),
                    summary,
                }))
            },
            |_, sample| {
                done(&sample);
                finished.push(sample);
                Ok(())
            },
        )
    })??;
    finished.sort_by_key(|s| s.sample);
    Ok(finished)
}

/// The vote over `samples` of `question` by the verifier of the profile's answers
/// (`catena_eval::vote`).
pub fn vote(
    samples: &[Sample],
    answer: AnswerFormat,
    question: &str,
    sandbox: Option<&Sandbox>,
) -> Result<Tally> {
    let chains: Vec<ChainAnswer<'_>> = samples
        .iter()
        .map(|s| ChainAnswer {
            answer: s.summary.answer.as_deref(),
            mean_logprob: s.summary.mean_logprob,
            trajectory: &s.summary.trajectory,
            stop: Some(s.summary.stop_reason),
            printed: &s.summary.printed,
        })
        .collect();
    Ok(vote_on_chains(&chains, answer, question, sandbox)?)
}

/// The tally for people, on stderr, and the winning answer on stdout.
pub fn print_vote(samples: &[Sample], tally: &Tally) {
    let mut err = anstream::stderr();
    let chains = |members: &[usize]| {
        members
            .iter()
            .map(|&i| samples[i].sample.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(err, "\nVote over {} chains:", samples.len());
    for (rank, group) in tally.groups.iter().enumerate() {
        let _ = writeln!(
            err,
            "  {} × {}   chains {}   mean log-prob {:.3}{}{}",
            group.members.len(),
            one_line(&group.answer),
            chains(&group.members),
            group.mean_logprob,
            if group.printed {
                "   printed by a program"
            } else {
                ""
            },
            if rank == 0 { "   ← the answer" } else { "" }
        );
        for &i in &group.from_output {
            let answered = samples[i].summary.answer.as_deref().map(one_line);
            let _ = writeln!(
                err,
                "      chain {} answered {}; its last program printed this",
                samples[i].sample,
                answered.as_deref().unwrap_or("nothing")
            );
        }
    }
    if !tally.abstained.is_empty() {
        let _ = writeln!(err, "  no answer: chains {}", chains(&tally.abstained));
    }
    match tally.winner() {
        Some(group) => println!("{}", group.answer.trim()),
        None => {
            let _ = writeln!(err, "No chain gave an answer.");
        }
    }
}

/// One line per chain as it ends, on stderr.
pub fn print_sample(sample: &Sample, of: usize) {
    let s = &sample.summary;
    eprintln!(
        "chain {}/{of} (seed {}): {} · stop {} · {} tool calls · {} tokens · {}",
        sample.sample,
        sample.seed,
        s.answer
            .as_deref()
            .map(one_line)
            .unwrap_or("(no answer)".into()),
        s.stop_reason,
        s.tool_calls,
        s.generated_tokens,
        if sample.valid {
            "valid chain"
        } else {
            "malformed chain"
        },
    );
}

/// `--json`: one `sample` object per chain, then the `vote`.
pub fn print_json(samples: &[Sample], tally: &Tally) {
    let mut out = std::io::stdout().lock();
    for sample in samples {
        let value = serde_json::json!({
            "type": "sample",
            "sample": sample.sample,
            "seed": sample.seed,
            "valid": sample.valid,
            "mean_logprob": sample.summary.mean_logprob,
            "run_id": sample.run_id,
            "summary": sample.summary,
        });
        let _ = writeln!(out, "{value}");
    }
    let vote = serde_json::json!({
        "type": "vote",
        "answer": tally.winner().map(|g| g.answer.clone()),
        "groups": tally.groups.iter().map(|g| serde_json::json!({
            "answer": g.answer,
            "samples": g.members.iter().map(|&i| samples[i].sample).collect::<Vec<_>>(),
            "mean_logprob": g.mean_logprob,
            "printed": g.printed,
            "from_output": g.from_output.iter().map(|&i| samples[i].sample).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "abstained": tally.abstained.iter().map(|&i| samples[i].sample).collect::<Vec<_>>(),
    });
    let _ = writeln!(out, "{vote}");
}

fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(79).collect::<String>())
    } else {
        line
    }
}
