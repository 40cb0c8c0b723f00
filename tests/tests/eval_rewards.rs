//! The code reward through the real sandbox (CPython in wasmtime): programs that pass, fail,
//! crash or hang, in both test forms, and `score_run` with its format gate. Like the other
//! sandbox tests, these fetch the Python runtime when it is missing and fail loudly when it
//! cannot be had.

mod common;

use catena_eval::reward::code_passes;
use catena_eval::{CodeTests, EvalTask, TaskKind, score_run};
use catena_sandbox::Limits;
use std::time::Duration;

fn io_tests() -> CodeTests {
    CodeTests::Io {
        inputs: vec!["1 2\n".into(), "10 -3\n".into()],
        outputs: vec!["3\n".into(), "7".into()],
    }
}

fn add_asserts() -> CodeTests {
    CodeTests::Assert {
        snippet: "assert add(1, 2) == 3\nassert add(-1, 1) == 0".into(),
    }
}

#[test]
fn programs_pass_or_fail_their_tests_in_the_sandbox() {
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(3),
        ..Limits::default()
    });
    let io = io_tests();
    let sum = "a, b = map(int, input().split())\nprint(a + b)\n";
    assert!(code_passes(sum, &io, &sandbox).unwrap());
    let trailing = "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\n";
    assert!(
        code_passes(trailing, &io, &sandbox).unwrap(),
        "trailing spaces and blank lines are ignored"
    );
    let wrong = "a, b = map(int, input().split())\nprint(a - b)\n";
    assert!(!code_passes(wrong, &io, &sandbox).unwrap());
    let first_only = "print(3)\n";
    assert!(!code_passes(first_only, &io, &sandbox).unwrap());
    let crash = "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(2)\n";
    assert!(
        !code_passes(crash, &io, &sandbox).unwrap(),
        "a non-zero exit fails"
    );
    let exception = "print(3)\n1/0\n";
    assert!(!code_passes(exception, &io, &sandbox).unwrap());
    let hang = "while True:\n    pass\n";
    assert!(
        !code_passes(hang, &io, &sandbox).unwrap(),
        "a timeout fails"
    );
    let syntax = "def (:\n";
    assert!(!code_passes(syntax, &io, &sandbox).unwrap());

    let asserts = add_asserts();
    assert!(code_passes("def add(a, b):\n    return a + b\n", &asserts, &sandbox).unwrap());
    assert!(!code_passes("def add(a, b):\n    return a * b\n", &asserts, &sandbox).unwrap());
    assert!(!code_passes("", &asserts, &sandbox).unwrap());

    let broken = CodeTests::Io {
        inputs: vec!["1\n".into()],
        outputs: Vec::new(),
    };
    assert!(!code_passes("print(1)", &broken, &sandbox).unwrap());
}

#[test]
fn score_run_runs_the_answer_program_and_gates_the_format() {
    let sandbox = common::python_sandbox(Limits {
        wall: Duration::from_secs(3),
        ..Limits::default()
    });
    let task = EvalTask {
        id: "sum".into(),
        question: "Read two integers and print their sum.".into(),
        answer: "2 stdin/stdout tests".into(),
        family: Some("livecodebench".into()),
        kind: Some(TaskKind::Code),
        tests: Some(io_tests()),
    };
    let answer = "```python\na, b = map(int, input().split())\nprint(a + b)\n```";
    let good = format!(
        "<plan>1. read 2. add</plan>\n<code>\n```py\nprint(1 + 2)\n```\n</code>\n<observation>\n3\n</observation>\n\n<answer>\n{answer}\n</answer>"
    );
    let score = score_run(&task, Some(answer), &good, Some(&sandbox));
    assert_eq!((score.reward, score.solved, score.f1), (1.0, true, None));

    let sloppy = format!("<code>print(1 + 2)</code>\n<answer>\n{answer}\n</answer>");
    let score = score_run(&task, Some(answer), &sloppy, Some(&sandbox));
    assert_eq!(
        (score.reward, score.solved),
        (0.0, true),
        "the format gate zeroes the reward, not the verdict"
    );

    let unfenced = "a, b = map(int, input().split())\nprint(a + b)";
    let score = score_run(&task, Some(unfenced), &good, Some(&sandbox));
    assert_eq!(
        (score.reward, score.solved),
        (0.0, false),
        "no fence, no program"
    );
    let score = score_run(&task, Some(answer), &good, None);
    assert_eq!((score.reward, score.solved), (0.0, false), "no sandbox");
    let score = score_run(&task, None, &good, Some(&sandbox));
    assert_eq!(score.reward, 0.0);
}
