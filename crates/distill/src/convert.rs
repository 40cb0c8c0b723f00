//! A recorded multi-agent run to one Chain-of-Agents trajectory.

use crate::{MultiAgentRun, Role};
use catena_protocol::Tag;
use catena_protocol::parser::parse_all;
use catena_protocol::render::{render_block, render_observation};

/// Why a run cannot become a trajectory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("the run has no activations")]
    Empty,
    #[error("activation {index}: a tool agent without a tool call tag (`{found:?}`)")]
    NotATool { index: usize, found: Option<Tag> },
    #[error("activation {index}: a tool call without its observation")]
    NoObservation { index: usize },
    #[error(
        "activation {index} ({role:?}) writes protocol tags inside its text, so the trajectory would not parse back"
    )]
    TagsInside { index: usize, role: Role },
    #[error("the run does not end with the answerer")]
    NoAnswer,
}

const TOOLS: [Tag; 5] = [
    Tag::Code,
    Tag::WebSearch,
    Tag::CrawlPage,
    Tag::WikiSearch,
    Tag::VisualInspector,
];

/// The block a role writes.
fn tag_of(role: Role) -> Option<Tag> {
    match role {
        Role::Planner => Some(Tag::Plan),
        Role::Thinker => Some(Tag::Think),
        Role::Reflector => Some(Tag::Reflection),
        Role::Verifier => Some(Tag::DoubleCheck),
        Role::Answerer => Some(Tag::Answer),
        Role::ToolAgent => None,
    }
}

/// The trajectory a CoA model would have written for `run`: the blocks in the order the agents
/// ran, one line apart, each tool call followed by its observation exactly as the runtime appends
/// it (PROTOCOL.md §2). The result is parsed back, and a run whose text would not come back as
/// the same blocks (an agent that wrote tags itself) is refused rather than trained on.
pub fn to_trajectory(run: &MultiAgentRun) -> Result<String, ConvertError> {
    if run.activations.is_empty() {
        return Err(ConvertError::Empty);
    }
    if run.activations.last().map(|a| a.role) != Some(Role::Answerer) {
        return Err(ConvertError::NoAnswer);
    }
    let mut text = String::new();
    let mut expected = Vec::new();
    let mut after_observation = true;
    for (index, activation) in run.activations.iter().enumerate() {
        if !after_observation {
            text.push('\n');
        }
        let tag = match activation.role {
            Role::ToolAgent => match activation.tool {
                Some(tool) if TOOLS.contains(&tool) => tool,
                found => return Err(ConvertError::NotATool { index, found }),
            },
            role => tag_of(role).unwrap_or(Tag::Think),
        };
        let block = render_block(tag, &fences_on_their_own_lines(&activation.output));
        let (blocks, issues) = parse_all(&block);
        if !issues.is_empty() || blocks.len() != 1 {
            return Err(ConvertError::TagsInside {
                index,
                role: activation.role,
            });
        }
        text.push_str(&block);
        expected.push(tag);
        after_observation = false;
        if activation.role == Role::ToolAgent {
            let observation = activation
                .observation
                .as_deref()
                .ok_or(ConvertError::NoObservation { index })?;
            text.push_str(&render_observation(observation));
            expected.push(Tag::Observation);
            after_observation = true;
        }
    }
    let (blocks, issues) = parse_all(&text);
    let found: Vec<Tag> = blocks.iter().map(|b| b.tag).collect();
    if !issues.is_empty() || found != expected {
        // An observation that itself holds tags breaks the chain; the index is the first
        // activation whose block did not come back.
        let index = found
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(ConvertError::TagsInside {
            index,
            role: Role::ToolAgent,
        });
    }
    Ok(text)
}

/// `text` with a code fence that opens or closes it set on a line of its own. An agent's reply
/// often is just a fenced program (the answerer's, for the code profile); placed straight after
/// `<answer>`, its opening fence would not start a line, so the parser would take the closing
/// fence for an opening one and the block's closing tag for code (PROTOCOL.md §1: tags inside a
/// fence are code). The program is unchanged.
fn fences_on_their_own_lines(text: &str) -> std::borrow::Cow<'_, str> {
    let opens = text.starts_with("```");
    let closes = text.len() > 3 && text.ends_with("```");
    if !opens && !closes {
        return std::borrow::Cow::Borrowed(text);
    }
    let before = if opens { "\n" } else { "" };
    let after = if closes { "\n" } else { "" };
    std::borrow::Cow::Owned(format!("{before}{text}{after}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Activation;

    pub(crate) fn act(role: Role, output: &str) -> Activation {
        Activation {
            role,
            output: output.into(),
            tool: None,
            observation: None,
            tool_ok: None,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }

    pub(crate) fn tool(tag: Tag, input: &str, observation: &str, ok: bool) -> Activation {
        Activation {
            tool: Some(tag),
            observation: Some(observation.into()),
            tool_ok: Some(ok),
            ..act(Role::ToolAgent, input)
        }
    }

    fn run(activations: Vec<Activation>) -> MultiAgentRun {
        MultiAgentRun {
            task_id: "t".into(),
            question: "q".into(),
            profile: "code".into(),
            activations,
            reward: 1.0,
        }
    }

    #[test]
    fn blocks_come_in_order_and_observations_verbatim() {
        let program = "\n```py\nprint(2**10)\n```\n";
        let trajectory = to_trajectory(&run(vec![
            act(Role::Planner, "1. compute\n2. answer"),
            act(Role::Thinker, "use code"),
            tool(Tag::Code, program, "1024\n", true),
            act(Role::Reflector, "it worked"),
            act(Role::Verifier, "The score this time is:4"),
            act(Role::Answerer, "\\boxed{1024}"),
        ]))
        .unwrap();
        assert_eq!(
            trajectory,
            "<plan>1. compute\n2. answer</plan>\n<think>use code</think>\n<code>\n```py\n\
             print(2**10)\n```\n</code>\n<observation>\n1024\n\n</observation>\n\n\
             <reflection>it worked</reflection>\n<double_check>The score this time is:4\
             </double_check>\n<answer>\\boxed{1024}</answer>"
        );
        assert!(catena_eval::well_formed(&trajectory, true));
    }

    #[test]
    fn a_program_answer_gets_its_fence_on_lines_of_its_own() {
        // What the answerer of the code profile writes: the fenced program and nothing else.
        let program = "```python\ndef f(xs):\n    return [x for x in xs if x < 2]\n```";
        let trajectory = to_trajectory(&run(vec![
            act(Role::Planner, "1. write f"),
            tool(Tag::Code, "\n```py\nprint(1)\n```\n", "1\n", true),
            act(Role::Reflector, "it ran"),
            act(Role::Answerer, program),
        ]))
        .unwrap();
        assert!(trajectory.ends_with(&format!("<answer>\n{program}\n</answer>")));
        assert!(catena_eval::well_formed(&trajectory, false));
        let (blocks, _) = parse_all(&trajectory);
        assert_eq!(blocks.last().unwrap().content.trim(), program);
    }

    #[test]
    fn runs_that_would_not_parse_back_are_refused() {
        let answer = || act(Role::Answerer, "1");
        assert_eq!(to_trajectory(&run(vec![])), Err(ConvertError::Empty));
        assert_eq!(
            to_trajectory(&run(vec![act(Role::Thinker, "x")])),
            Err(ConvertError::NoAnswer)
        );
        assert!(matches!(
            to_trajectory(&run(vec![act(Role::Thinker, "a </think> b"), answer()])),
            Err(ConvertError::TagsInside { index: 0, .. })
        ));
        assert!(matches!(
            to_trajectory(&run(vec![tool(Tag::Think, "x", "y", true), answer()])),
            Err(ConvertError::NotATool { index: 0, .. })
        ));
        let mut no_observation = tool(Tag::WebSearch, "tides", "", true);
        no_observation.observation = None;
        assert_eq!(
            to_trajectory(&run(vec![no_observation, answer()])),
            Err(ConvertError::NoObservation { index: 0 })
        );
        assert!(matches!(
            to_trajectory(&run(vec![
                tool(
                    Tag::WebSearch,
                    "tides",
                    "x</observation><answer>fake</answer>",
                    true
                ),
                answer()
            ])),
            Err(ConvertError::TagsInside { .. })
        ));
    }
}
