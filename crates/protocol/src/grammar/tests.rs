use super::*;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::ApproximateTokEnv;

/// Whether `text` is a complete segment of `grammar`, fed one byte (one token) at a time.
fn accepts(grammar: &str, text: &str) -> bool {
    let env = ApproximateTokEnv::single_byte_env();
    let mut factory = ParserFactory::new_simple(&env).unwrap();
    factory.set_stderr_log_level(0);
    let parser = factory
        .create_parser(TopLevelGrammar::from_lark(grammar.to_string()))
        .unwrap_or_else(|e| panic!("the grammar does not build: {e}\n{grammar}"));
    let mut matcher = Matcher::new(Ok(parser));
    assert!(matcher.get_error().is_none(), "{:?}", matcher.get_error());
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    matcher.consume_tokens(&tokens).is_ok() && matcher.is_accepting().unwrap_or(false)
}

fn grammar(profile: &str, segment: Segment) -> String {
    let profile = Profile::builtin(profile).unwrap();
    ChainGrammar::for_profile(&profile)
        .segment(segment)
        .to_string()
}

const PLAN: &str = "<plan>\n1. Count the primes.\n2. Answer.\n</plan>\n\n";
const CODE: &str = "<code>\n```py\nprint(sum(1 for n in range(2, 10) if all(n % d for d in range(2, n))))\n```\n</code>";

#[test]
fn every_builtin_profile_has_grammars_that_build() {
    for name in Profile::builtin_names() {
        for segment in [
            Segment::Opening,
            Segment::Resuming,
            Segment::AnswerOnly,
            Segment::Answer,
        ] {
            // An empty text is never a whole segment, but the grammar must compile.
            assert!(!accepts(&grammar(name, segment), ""), "{name} {segment:?}");
        }
    }
}

#[test]
fn a_math_chain_opens_with_its_plan_and_ends_with_a_call_or_a_boxed_answer() {
    let opening = grammar("math", Segment::Opening);
    assert!(accepts(
        &opening,
        &format!("{PLAN}<think>Use a sieve.</think>\n{CODE}")
    ));
    assert!(accepts(&opening, &format!("{PLAN}{CODE}")));
    assert!(accepts(
        &opening,
        &format!("{PLAN}<answer>\\boxed{{4}}</answer>")
    ));
    // No plan first, free text between blocks, an answer without \boxed.
    assert!(!accepts(&opening, CODE));
    assert!(!accepts(&opening, &format!("{PLAN}So:\n{CODE}")));
    assert!(!accepts(&opening, &format!("{PLAN}<answer>4</answer>")));
    // Nothing after the call: the runtime writes the observation.
    assert!(!accepts(
        &opening,
        &format!("{PLAN}{CODE}\n<observation>4</observation>")
    ));
}

#[test]
fn the_failure_the_issue_saw_cannot_be_written() {
    let resuming = grammar("math", Segment::Resuming);
    // A program inside <think>, then prose inside <code>.
    let program_in_thought = "<think>\n```py\nprint(1)\n```\n</think>";
    assert!(!accepts(
        &resuming,
        &format!("{program_in_thought}<answer>\\boxed{{1}}</answer>")
    ));
    assert!(!accepts(
        &resuming,
        "<code>\nLet me count the primes.\n</code>"
    ));
    // A tag inside a block, a block inside a block, an observation written by the model.
    assert!(!accepts(
        &resuming,
        "<think>I <reflection>see</reflection></think><answer>\\boxed{1}</answer>"
    ));
    assert!(!accepts(&resuming, "<observation>\n4\n</observation>"));
    // Two programs in one call.
    let two = "<code>\n```py\nprint(1)\n```\n```py\nprint(2)\n```\n</code>";
    assert!(!accepts(&resuming, two));
}

#[test]
fn a_boxed_answer_is_the_value_and_nothing_else() {
    let resuming = grammar("math", Segment::Resuming);
    assert!(accepts(
        &resuming,
        "<answer>\n\\boxed{\\frac{\\sqrt{2}}{2}}\n</answer>"
    ));
    assert!(!accepts(
        &resuming,
        "<answer>The count is \\boxed{1229}.</answer>"
    ));
    // What a small model wrote when it could not close an unboxed answer: a half-closed tag,
    // then a tag-like word, then the closing tag.
    assert!(!accepts(
        &resuming,
        "<answer>\\boxed{32}</answer\n</answer>"
    ));
    assert!(!accepts(
        &resuming,
        "<think>Fine <think/> here.</think><answer>\\boxed{1}</answer>"
    ));
    // A `<` just before the closing tag (`<</plan>`).
    assert!(!accepts(
        &resuming,
        "<think>Code:\n<</think><answer>\\boxed{1}</answer>"
    ));
    // What it wrote when it wanted a program inside its thought.
    assert!(!accepts(
        &resuming,
        "<think>So:\n< code>\nprint(1)\n</think><answer>\\boxed{1}</answer>"
    ));
}

#[test]
fn white_space_between_blocks_is_bounded() {
    let resuming = grammar("math", Segment::Resuming);
    assert!(accepts(
        &resuming,
        "\n\n<think>a</think>\n\n<answer>\\boxed{1}</answer>"
    ));
    let spaces = " ".repeat(40);
    assert!(!accepts(
        &resuming,
        &format!("<think>a</think>{spaces}<answer>\\boxed{{1}}</answer>")
    ));
}

#[test]
fn code_calls_take_one_program_and_optional_stdin() {
    let resuming = grammar("code", Segment::Resuming);
    assert!(accepts(
        &resuming,
        "<reflection>Fine.</reflection>\n<code>\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n```sh\n3 4\n```\n</code>"
    ));
    assert!(accepts(
        &resuming,
        "<think>Check n < 10 and n <= 9.</think>\n<code>\n```py\nprint(1 < 2)\n```\n</code>"
    ));
    // The answer is one fenced program and nothing else.
    assert!(accepts(
        &resuming,
        "<answer>\n```python\nprint(input())\n```\n</answer>"
    ));
    assert!(!accepts(&resuming, "<answer>print(input())</answer>"));
    assert!(!accepts(
        &resuming,
        "<answer>\nHere:\n```python\nprint(input())\n```\n</answer>"
    ));
}

#[test]
fn a_prefill_may_hold_several_calls() {
    let resuming = grammar("math", Segment::Resuming);
    assert!(accepts(
        &resuming,
        &format!("<think>Two.</think>\n{CODE}\n{CODE}")
    ));
    assert!(accepts(
        &resuming,
        &format!("{CODE}\n<think>Then.</think>\n{CODE}")
    ));
}

#[test]
fn the_last_call_of_the_budget_leaves_only_the_answer() {
    let last = grammar("math", Segment::AnswerOnly);
    assert!(accepts(
        &last,
        "<reflection>Done.</reflection><answer>\\boxed{1229}</answer>"
    ));
    assert!(!accepts(&last, CODE));
}

#[test]
fn a_chain_cut_short_may_only_answer() {
    let answer = grammar("math", Segment::Answer);
    assert!(accepts(&answer, "\n<answer>\\boxed{1229}</answer>"));
    assert!(!accepts(
        &answer,
        "<reflection>Done.</reflection><answer>\\boxed{1229}</answer>"
    ));
    assert!(!accepts(&answer, CODE));
    let code = grammar("code", Segment::Answer);
    assert!(accepts(
        &code,
        "<answer>\n```py\ndef f():\n    return 1\n```\n</answer>"
    ));
    assert!(!accepts(&code, "<answer>return 1</answer>"));
}

#[test]
fn each_profile_gets_its_own_blocks() {
    let web = grammar("web", Segment::Opening);
    assert!(accepts(
        &web,
        "<think>Search.</think><web_search>tallest building in Oslo</web_search>"
    ));
    assert!(accepts(
        &web,
        "<think>Sure.</think><suggested_answer>Oslo</suggested_answer><double_check>The score this time is:4</double_check><answer>Oslo</answer>"
    ));
    assert!(!accepts(&web, &format!("<think>x</think>{CODE}")));
    assert!(!accepts(&web, "<think>x</think><web_search> </web_search>"));
    // The code profile never describes <double_check>, so its chains cannot write one.
    let code = grammar("code", Segment::Resuming);
    assert!(!accepts(
        &code,
        "<double_check>4</double_check><answer>\n```python\nprint(1)\n```\n</answer>"
    ));
    let mhqa = grammar("mhqa", Segment::Opening);
    assert!(accepts(
        &mhqa,
        "<think>Two hops.</think>\n<plan>1. Find X.</plan>\n<wiki_search>X</wiki_search>"
    ));
    assert!(!accepts(
        &mhqa,
        "<plan>1. Find X.</plan>\n<wiki_search>X</wiki_search>"
    ));
}

#[test]
fn a_profile_file_cannot_open_with_a_block_it_does_not_describe() {
    let text = r#"
        name = "x"
        description = "d"
        tools = ["code"]
        answer = "short"
        max_tool_calls = 1
        opens_with = ["plan"]
        user_template = "Use <think> and <code>. {question}"
    "#;
    let err = Profile::from_toml(text, "test").unwrap_err();
    assert!(err.to_string().contains("opens_with"), "{err}");
}

/// Texts at the edges of what the grammar lets a model write around fences: the trajectory parser
/// must read each of them whole, or a call the grammar allowed is never run.
#[test]
fn what_the_grammar_accepts_the_parser_reads_whole() {
    let resuming = grammar("code", Segment::Resuming);
    let texts = [
        // Fences on the tags' own lines (seen from the shipped adapter).
        "<code>```py\nprint(6*7)\n```</code>",
        "<code> ```python\nprint(1)\n```  </code>",
        "<code>\n```py\nx = input()\n```\n```sh\n3\n```</code>",
        "<code>```py\nx = input()\n```  \n  ```sh\n3\n```\n</code>",
        "<answer>```py\ndef f():\n    return 1\n```</answer>",
    ];
    for text in texts {
        assert!(accepts(&resuming, text), "the grammar refuses {text:?}");
        let (blocks, issues) = crate::parse_all(text);
        assert!(issues.is_empty(), "{text:?}: {issues:?}");
        let block = &blocks[0];
        assert!(block.closed, "{text:?}");
        assert!(
            crate::fence::program_and_stdin(&block.content).is_some(),
            "{text:?}: no program in {:?}",
            block.content
        );
    }
    // A stdin fence glued to the program's closing fence would be read as neither.
    assert!(!accepts(
        &resuming,
        "<code>\n```py\nx = input()\n``````sh\n3\n```\n</code>"
    ));
}
