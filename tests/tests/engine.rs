//! The llama.cpp engine on the real default model (and a second architecture).

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine_api::{
    ChatFormat, EngineError, GenerateLimits, GenerationStop, PromptPart, SamplingParams, Session,
    SessionOptions, StopMatcher,
};
use std::sync::OnceLock;

fn engine() -> &'static LlamaEngine {
    static ENGINE: OnceLock<LlamaEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        LlamaEngine::load(&common::default_model(), &LoadOptions::default())
            .expect("the default model")
    })
}

fn options(sampling: SamplingParams) -> SessionOptions {
    SessionOptions {
        context_size: Some(2048),
        sampling,
        logprobs: true,
        ..SessionOptions::default()
    }
}

fn prompt(user: &str) -> Vec<PromptPart> {
    engine()
        .chat_prompt("You are a helpful assistant.", user)
        .unwrap()
}

#[test]
fn the_default_model_is_chatml() {
    let info = engine().info();
    assert_eq!(info.architecture, "qwen2");
    assert_eq!(info.chat_template, ChatFormat::ChatMl);
    assert_eq!(info.layers, 24);
    // The ChatML markers are single special tokens; the same text typed by a user is not.
    assert_eq!(engine().tokenize("<|im_start|>", true).len(), 1);
    assert!(engine().tokenize("<|im_start|>", false).len() > 1);
}

#[test]
fn every_token_is_evaluated_once_and_the_context_matches_the_text() {
    let mut session = engine()
        .session(&options(SamplingParams::greedy()))
        .unwrap();
    let prompt_tokens = session
        .append(&prompt("Write a Python program that prints the sum of 1 to 10, inside <code> and </code> tags with a ```py fence."))
        .unwrap();
    let stats = session.stats();
    assert_eq!(stats.context_tokens, prompt_tokens);
    assert_eq!(stats.evaluated_tokens, prompt_tokens);

    let stops = StopMatcher::new(["</code>", "```\n"]);
    let mut streamed = String::new();
    let generation = session
        .generate(&stops, GenerateLimits::tokens(200), &mut |t| {
            streamed.push_str(t)
        })
        .unwrap();
    assert_eq!(streamed, generation.text);
    assert!(generation.tokens > 0);
    if let GenerationStop::StopString { index } = generation.stop {
        assert!(generation.text.ends_with(stops.stops()[index].as_str()));
    }
    // The context holds exactly the prompt and the returned text: nothing past a stop string.
    let generated_ids: Vec<i32> = session.tokens()[prompt_tokens..]
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(engine().detokenize(&generated_ids), generation.text);
    // Sampled tokens carry log-probabilities; prompt tokens do not.
    assert!(
        session.tokens()[..prompt_tokens]
            .iter()
            .all(|t| t.logprob.is_none())
    );
    let sampled: Vec<f32> = session.tokens()[prompt_tokens..]
        .iter()
        .filter_map(|t| t.logprob)
        .collect();
    assert!(!sampled.is_empty());
    assert!(
        sampled.iter().all(|lp| *lp <= 0.0 && lp.is_finite()),
        "{sampled:?}"
    );

    // An observation is appended after the (still pending) last token: one batch, no re-reading.
    let added = session
        .append(&[PromptPart::plain("\n<observation>\n55\n</observation>\n\n")])
        .unwrap();
    let stats = session.stats();
    assert_eq!(stats.context_tokens, session.tokens().len());
    assert_eq!(stats.evaluated_tokens, stats.context_tokens);
    assert_eq!(stats.appended_tokens, prompt_tokens + added);
    let more = session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(8),
            &mut |_| {},
        )
        .unwrap();
    let stats = session.stats();
    assert_eq!(stats.evaluated_tokens, stats.context_tokens);
    assert_eq!(stats.generated_tokens, generation.tokens + more.tokens);
}

#[test]
fn a_seed_makes_sampling_repeatable() {
    let run = |seed: u32| {
        let sampling = SamplingParams {
            temperature: 0.9,
            top_p: 0.95,
            top_k: 40,
            seed,
            ..SamplingParams::default()
        };
        let mut session = engine().session(&options(sampling)).unwrap();
        session.append(&prompt("Name three colours.")).unwrap();
        session
            .generate(
                &StopMatcher::default(),
                GenerateLimits::tokens(24),
                &mut |_| {},
            )
            .unwrap()
            .text
    };
    assert_eq!(run(5), run(5));
}

/// RL reads log-probabilities; everywhere else a pass over the vocabulary a token would be
/// wasted, so they are recorded only where asked for, greedy or sampled.
#[test]
fn log_probabilities_are_recorded_only_where_asked_for() {
    for sampling in [SamplingParams::greedy(), SamplingParams::default()] {
        let mut session = engine()
            .session(&SessionOptions {
                logprobs: false,
                ..options(sampling)
            })
            .unwrap();
        let prompt_tokens = session.append(&prompt("Name three colours.")).unwrap();
        let generation = session
            .generate(
                &StopMatcher::default(),
                GenerateLimits::tokens(8),
                &mut |_| {},
            )
            .unwrap();
        assert!(generation.tokens > 0);
        assert!(
            session.tokens()[prompt_tokens..]
                .iter()
                .all(|t| t.logprob.is_none())
        );
    }
}

/// With `greedy_on_device`, llama.cpp's argmax in the decode makes each pick and no logits come
/// back; on the CPU backend both picks read the same floats (the same graph up to the logits),
/// so the tokens must be the same, not merely close (only an exact tie between two logits could
/// part them: ggml's argmax takes the last of equal maxima, `TokenSampler` the first).
#[test]
fn greedy_picks_on_the_device_are_the_picks_from_the_logits() {
    let run = |greedy_on_device: bool| {
        let mut session = engine()
            .session(&SessionOptions {
                greedy_on_device,
                logprobs: false,
                ..options(SamplingParams::greedy())
            })
            .unwrap();
        session
            .append(&prompt(
                "Name three prime numbers and say why each is prime.",
            ))
            .unwrap();
        let mut streamed = String::new();
        let generation = session
            .generate(
                &StopMatcher::new(["\n\n"]),
                GenerateLimits::tokens(64),
                &mut |t| streamed.push_str(t),
            )
            .unwrap();
        assert_eq!(streamed, generation.text);
        let ids: Vec<i32> = session.tokens().iter().map(|t| t.id).collect();
        (generation.text, generation.tokens, ids)
    };
    let on_device = run(true);
    let from_logits = run(false);
    assert!(on_device.1 >= 8, "generated only {:?}", on_device.0);
    assert_eq!(on_device, from_logits);
}

/// A session that keeps no logits cannot serve a generation that needs them: it says so and
/// generates nothing, and its context stays as it was.
#[test]
fn a_session_with_greedy_picks_on_the_device_refuses_what_needs_the_logits() {
    let mut session = engine()
        .session(&SessionOptions {
            greedy_on_device: true,
            logprobs: false,
            ..options(SamplingParams::greedy())
        })
        .unwrap();
    let prompt_tokens = session.append(&prompt("Name three colours.")).unwrap();
    let generate = |session: &mut dyn Session| {
        session.generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(8),
            &mut |_| {},
        )
    };
    session.set_sampling(SamplingParams::default());
    match generate(&mut session) {
        Err(EngineError::Decode(message)) => assert!(message.contains("temperature"), "{message}"),
        other => panic!("a draw at a temperature was not refused: {other:?}"),
    }
    session.set_sampling(SamplingParams::greedy());
    session
        .constrain(&catena_engine_api::Constraint::strict(
            r#"start: "red" | "blue""#,
        ))
        .unwrap();
    match generate(&mut session) {
        Err(EngineError::Decode(message)) => assert!(message.contains("grammar"), "{message}"),
        other => panic!("a grammar was not refused: {other:?}"),
    }
    assert_eq!(session.tokens().len(), prompt_tokens);
    // A free greedy generation still runs after the refusals.
    assert!(generate(&mut session).unwrap().tokens > 0);
}

#[test]
fn a_full_context_is_an_error_not_a_crash() {
    let mut session = engine()
        .session(&SessionOptions {
            context_size: Some(64),
            ..options(SamplingParams::greedy())
        })
        .unwrap();
    // llama.cpp may round the window up; overflow whatever it chose.
    let long = "word ".repeat(session.context_size() + 10);
    let err = session.append(&[PromptPart::plain(long)]).unwrap_err();
    assert!(matches!(err, EngineError::ContextOverflow { .. }), "{err}");
    // The session is still usable after the refused append.
    session.append(&[PromptPart::plain("Hello")]).unwrap();
    let g = session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(session.context_size() + 10),
            &mut |_| {},
        )
        .unwrap();
    assert!(matches!(
        g.stop,
        GenerationStop::ContextFull | GenerationStop::EndOfTurn
    ));
}

#[test]
fn a_second_architecture_without_a_chat_template_runs() {
    let gemma = LlamaEngine::load(&common::gemma_model(), &LoadOptions::default()).unwrap();
    assert_eq!(gemma.info().architecture, "gemma3");
    let prompt = gemma
        .chat_prompt("You are terse.", "The capital of France is")
        .unwrap();
    let mut session = gemma.session(&options(SamplingParams::greedy())).unwrap();
    session.append(&prompt).unwrap();
    let g = session
        .generate(
            &StopMatcher::default(),
            GenerateLimits::tokens(16),
            &mut |_| {},
        )
        .unwrap();
    assert!(g.tokens > 0);
    let stats = session.stats();
    assert_eq!(stats.evaluated_tokens, stats.context_tokens);
}

/// The prompt cache (docs/ARCHITECTURE.md, "The prompt cache"): a task's profile instructions,
/// put back from the cache, give the numbers evaluating them gives, to the last bit. Three fresh
/// engines run the same greedy task: the first evaluates the shared prefix and writes it, the
/// second reads it, the third has no cache at all.
#[test]
fn a_prefix_from_the_prompt_cache_gives_the_numbers_of_evaluating_it() {
    let dir = tempfile::tempdir().unwrap();
    let profile = catena_protocol::profile::Profile::builtin("math").unwrap();
    let run = |cache: Option<std::path::PathBuf>| {
        let engine = LlamaEngine::load(
            &common::default_model(),
            &LoadOptions {
                prompt_cache: cache,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let mut session = engine.session(&options(SamplingParams::greedy())).unwrap();
        let start = catena_agent::start_task(&mut session, &profile, "What is 17 * 23?").unwrap();
        session
            .generate(
                &StopMatcher::default(),
                GenerateLimits::tokens(24),
                &mut |_| {},
            )
            .unwrap();
        let generated: Vec<(i32, u32)> = session.tokens()[start.prompt_tokens..]
            .iter()
            .map(|t| (t.id, t.logprob.unwrap().to_bits()))
            .collect();
        (start, generated)
    };
    let (first, written) = run(Some(dir.path().to_path_buf()));
    assert_eq!(first.cached_tokens, 0);
    let entries = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(entries, 1, "one entry for the math profile's prefix");

    let (second, read) = run(Some(dir.path().to_path_buf()));
    // Everything up to the question came from the cache.
    assert!(
        second.cached_tokens >= 300 && second.cached_tokens + 5 < second.prompt_tokens,
        "{second:?}"
    );
    assert_eq!(read.len(), 24);
    assert_eq!(
        written, read,
        "the numbers changed with the prefix from the cache"
    );

    let (third, uncached) = run(None);
    assert_eq!(third.cached_tokens, 0);
    assert_eq!(written, uncached, "the numbers changed without a cache");
}
