//! Constrained decoding on the real default model: a grammar from the first token, a lazy one
//! after its trigger, and a bad grammar refused before anything is generated.

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine_api::{
    Constraint, EngineError, GenerateLimits, GenerationStop, SamplingParams, Session,
    SessionOptions, StopMatcher,
};
use serde_json::Value;
use std::sync::OnceLock;

fn engine() -> &'static LlamaEngine {
    static ENGINE: OnceLock<LlamaEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        LlamaEngine::load(&common::default_model(), &LoadOptions::default())
            .expect("the default model")
    })
}

fn generate(
    user: &str,
    constraint: Option<&Constraint>,
    sampling: SamplingParams,
) -> (String, GenerationStop) {
    let mut session = engine()
        .session(&SessionOptions {
            context_size: Some(1024),
            sampling,
            ..SessionOptions::default()
        })
        .unwrap();
    session
        .append(
            &engine()
                .chat_prompt("You are a helpful assistant.", user)
                .unwrap(),
        )
        .unwrap();
    if let Some(constraint) = constraint {
        session.constrain(constraint).unwrap();
    }
    let generation = session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(120),
            &mut |_| {},
        )
        .unwrap();
    (generation.text, generation.stop)
}

const PERSON: &str = r#"start: %json {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 150}, "role": {"enum": ["admin", "user"]}}, "required": ["name", "age", "role"], "additionalProperties": false}"#;

#[test]
fn a_schema_holds_from_the_first_token_whatever_is_sampled() {
    let constraint = Constraint::strict(PERSON);
    for seed in 1..=4 {
        let sampling = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed,
            ..SamplingParams::default()
        };
        let (text, stop) = generate("Tell me a joke about cats.", Some(&constraint), sampling);
        assert_eq!(stop, GenerationStop::EndOfTurn, "seed {seed}: {text}");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let role = value["role"].as_str().unwrap();
        assert!(role == "admin" || role == "user", "{text}");
        assert!(value["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
        assert_eq!(value.as_object().unwrap().len(), 3, "{text}");
    }
    // The same prompt without the grammar is not JSON: the grammar, not the prompt, shaped it.
    let (free, _) = generate("Tell me a joke about cats.", None, SamplingParams::greedy());
    assert!(serde_json::from_str::<Value>(&free).is_err(), "{free}");
}

#[test]
fn a_lazy_grammar_waits_for_its_trigger_then_holds() {
    let user = "Write the sentence 'My favourite number is: 12' and nothing else.";
    let (free, _) = generate(user, None, SamplingParams::greedy());
    assert!(
        free.contains("is:"),
        "the trigger must come freely for this test: {free}"
    );
    let constraint = Constraint::after("is:", r#"start: " " ("7" | "8") "!""#);
    let (text, stop) = generate(user, Some(&constraint), SamplingParams::greedy());
    let (before, after) = text.split_once("is:").unwrap();
    // Free before the trigger (the same text as without a grammar), held after it.
    assert!(free.starts_with(before), "{free} / {text}");
    assert!(after == " 7!" || after == " 8!", "{text}");
    assert_eq!(stop, GenerationStop::EndOfTurn);
}

#[test]
fn a_bad_grammar_is_refused_before_decoding() {
    let mut session = engine().session(&SessionOptions::default()).unwrap();
    for grammar in [
        "start: %json {\"type\": \"dict\"}",
        "start: (",
        "start: \"a\" undefined_rule",
    ] {
        match session.constrain(&Constraint::strict(grammar)) {
            Err(EngineError::BadGrammar(_)) => {}
            other => panic!("{grammar}: {other:?}"),
        }
    }
    assert!(session.tokens().is_empty());
}

#[test]
fn text_already_written_is_checked_and_continued() {
    let grammar = r#"start: "The answer is " ("7" | "8") "!""#;
    let mut session = engine().session(&SessionOptions::default()).unwrap();
    session
        .append(
            &engine()
                .chat_prompt("You are terse.", "Pick 7 or 8.")
                .unwrap(),
        )
        .unwrap();
    let before = session.tokens().len();
    // Text that leaves the grammar is refused before anything is generated.
    match session.constrain(&Constraint::strict(grammar).continuing("The result")) {
        Err(EngineError::OutsideGrammar(message)) => {
            assert!(message.contains("The result"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(session.tokens().len(), before);
    // Text that fits is continued: only the rest is generated.
    session
        .append(&[catena_engine_api::PromptPart::plain("The answer")])
        .unwrap();
    session
        .constrain(&Constraint::strict(grammar).continuing("The answer"))
        .unwrap();
    let generation = session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(20),
            &mut |_| {},
        )
        .unwrap();
    assert!(
        generation.text == " is 7!" || generation.text == " is 8!",
        "{:?}",
        generation.text
    );
}

#[test]
fn sequences_decoded_together_each_follow_their_grammar() {
    let options = SessionOptions {
        context_size: Some(1024),
        sampling: SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 5,
            ..SamplingParams::default()
        },
        ..SessionOptions::default()
    };
    let grammars = [r#"start: "yes" | "no""#, PERSON, r#"start: /[0-9]{3}/"#];
    let texts = engine()
        .with_sequences(&options, grammars.len(), |sessions| {
            std::thread::scope(|scope| {
                let handles: Vec<_> = sessions
                    .into_iter()
                    .zip(grammars)
                    .map(|(mut session, grammar)| {
                        scope.spawn(move || {
                            session
                                .append(
                                    &engine()
                                        .chat_prompt("You are a poet.", "Write a long poem.")
                                        .unwrap(),
                                )
                                .unwrap();
                            session.constrain(&Constraint::strict(grammar)).unwrap();
                            session
                                .generate(
                                    &StopMatcher::default(),
                                    GenerateLimits::tokens(120),
                                    &mut |_| {},
                                )
                                .unwrap()
                                .text
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .unwrap();
    assert!(texts[0] == "yes" || texts[0] == "no", "{texts:?}");
    let person: Value =
        serde_json::from_str(&texts[1]).unwrap_or_else(|e| panic!("{e}: {texts:?}"));
    assert_eq!(person.as_object().unwrap().len(), 3, "{texts:?}");
    assert!(
        texts[2].len() == 3 && texts[2].chars().all(|c| c.is_ascii_digit()),
        "{texts:?}"
    );
}
