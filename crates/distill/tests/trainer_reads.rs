//! Distilled trajectories written as training data and read back by the trainer's own reader:
//! every record accepted, the trajectory intact, and the trainer's masks covering exactly the
//! observations (what the runtime wrote), nothing the agents wrote.
#![allow(clippy::unwrap_used)]

use catena_distill::{
    Activation, FilterConfig, MultiAgentRun, Role, alpaca_item, filter_runs, sft_line,
};
use catena_protocol::Tag;
use catena_trainer::data::{observation_spans, read_dataset};

fn act(role: Role, output: &str, tool: Option<(Tag, &str, bool)>) -> Activation {
    Activation {
        role,
        output: output.into(),
        tool: tool.map(|t| t.0),
        observation: tool.map(|t| t.1.to_string()),
        tool_ok: tool.map(|t| t.2),
        prompt_tokens: 100,
        completion_tokens: 20,
    }
}

#[test]
fn the_trainer_reads_distilled_data_and_masks_only_the_observations() {
    let observation = "Traceback (most recent call last):\nZeroDivisionError: division by zero";
    let run = MultiAgentRun {
        task_id: "div".into(),
        question: "What is 7 divided by 2?".into(),
        profile: "math".into(),
        activations: vec![
            act(Role::Planner, "1. divide\n2. answer", None),
            act(Role::Thinker, "compute it with code", None),
            act(
                Role::ToolAgent,
                "\n```py\nprint(7/0)\n```\n",
                Some((Tag::Code, observation, false)),
            ),
            act(Role::Reflector, "I divided by zero; divide by 2", None),
            act(
                Role::ToolAgent,
                "\n```py\nprint(7/2)\n```\n",
                Some((Tag::Code, "3.5\n", true)),
            ),
            act(Role::Answerer, "\\boxed{3.5}", None),
        ],
        reward: 1.0,
    };
    let config = FilterConfig {
        boxed_answer: true,
        ..FilterConfig::default()
    };
    let (kept, report) = filter_runs(&[run], &config);
    assert_eq!(kept.len(), 1, "{report:?}");
    assert_eq!(kept[0].teacher_tokens, 6 * 120);

    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("distilled.jsonl");
    std::fs::write(&jsonl, sft_line(&kept[0]).unwrap().to_string() + "\n").unwrap();
    let alpaca = dir.path().join("distilled.json");
    let array = serde_json::Value::Array(vec![alpaca_item(&kept[0]).unwrap()]);
    std::fs::write(&alpaca, array.to_string()).unwrap();
    for file in [&jsonl, &alpaca] {
        let data = read_dataset(file).unwrap();
        assert!(data.rejected.is_empty(), "{:?}", data.rejected);
        assert_eq!(data.samples.len(), 1);
        let assistant = &data.samples[0].assistant;
        assert_eq!(assistant, &kept[0].trajectory);
        assert!(data.samples[0].user.contains("What is 7 divided by 2?"));
        let masked: Vec<&str> = observation_spans(assistant)
            .unwrap()
            .into_iter()
            .map(|span| &assistant[span])
            .collect();
        assert_eq!(
            masked,
            [
                format!("\n<observation>\n{observation}\n</observation>\n\n"),
                "\n<observation>\n3.5\n\n</observation>\n\n".to_string(),
            ]
        );
    }
}
