//! The checkpoint converter against llama.cpp, on a real model in the Hugging Face layout (the
//! default model written as a checkpoint: `common/checkpoint.rs`). Catena converts it back and
//! llama.cpp loads the result.

mod common;
#[path = "common/checkpoint.rs"]
mod made_checkpoint;

use made_checkpoint::checkpoint;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine::{GenerateLimits, SamplingParams, Session, SessionOptions, StopMatcher};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The checkpoint converted by Catena, once per test process.
fn converted() -> &'static Path {
    static FILE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = FILE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("converted-f16.gguf");
        let mut checkpoint = catena_convert::open(checkpoint()).unwrap();
        let written = checkpoint
            .write_f16(&path, "qwen2.5-coder-0.5b-instruct", &mut |_| {})
            .unwrap();
        assert_eq!(written.bytes, std::fs::metadata(&path).unwrap().len());
        (dir, path)
    });
    path
}

fn load(path: &Path) -> LlamaEngine {
    LlamaEngine::load(path, &LoadOptions::default()).unwrap()
}

/// Text with what tokenizers get wrong: protocol tags, code, whitespace runs, digits, Chinese,
/// Cyrillic, emoji, the chat markers.
const CORPUS: &[&str] = &[
    "<plan>\n1. Count the primes.\n</plan>\n<code>\nprint(sum(1 for n in range(2, 10000) if all(n % d for d in range(2, int(n**0.5) + 1))))\n</code>",
    "<observation>1229\n</observation><reflection>The count is right.</reflection><answer>\\boxed{1229}</answer>",
    "def f(x):\n\tif x  >  0:\n\t\treturn x ** 2\n    \n\n\n    return -x  # comment",
    "12345678901234567890 3.14159 1,000,000 0x1F -42",
    "中文分词测试：机器学习和深度学习。",
    "Проверка токенизации на русском языке.",
    "emoji 🤖🧪👩🏽‍💻 and ümlauts, café, naïve",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "   leading spaces and trailing   ",
];

#[test]
fn the_converted_tokenizer_matches_the_original_and_hugging_faces() {
    let original = load(&common::default_model());
    let converted = load(converted());
    let hf = tokenizers::Tokenizer::from_file(checkpoint().join("tokenizer.json")).unwrap();
    assert_eq!(converted.vocab_size(), original.vocab_size());
    for text in CORPUS {
        for special in [false, true] {
            let ours = converted.tokenize(text, special);
            assert_eq!(
                ours,
                original.tokenize(text, special),
                "{text:?} special={special}"
            );
            if special {
                // Hugging Face parses added tokens in the text (what llama.cpp's `special` does).
                let theirs: Vec<i32> = hf
                    .encode(*text, false)
                    .unwrap()
                    .get_ids()
                    .iter()
                    .map(|&id| id as i32)
                    .collect();
                assert_eq!(ours, theirs, "{text:?} against the tokenizers crate");
            }
        }
        let ids = converted.tokenize(text, false);
        assert_eq!(
            converted.detokenize(&ids),
            original.detokenize(&ids),
            "{text:?}"
        );
    }
    // The chat template survives: the same prompt, token for token.
    let prompt = |e: &LlamaEngine| {
        let parts = e
            .chat_prompt("You are a helpful assistant.", "What is 2+2?")
            .unwrap();
        e.tokenize_parts(&parts)
    };
    assert_eq!(prompt(&converted), prompt(&original));
}

/// Greedy generation: the tokens and the log-probability of each.
fn greedy(engine: &LlamaEngine, prompt: &str, n: usize) -> Vec<(i32, f32)> {
    let mut session = engine
        .session(&SessionOptions {
            context_size: Some(512),
            sampling: SamplingParams::greedy(),
            ..SessionOptions::default()
        })
        .unwrap();
    let parts = engine
        .chat_prompt("You are a helpful assistant.", prompt)
        .unwrap();
    let prompt_len = session.append(&parts).unwrap();
    let stops = StopMatcher::new(Vec::<String>::new());
    session
        .generate(&stops, GenerateLimits::tokens(n), &mut |_| {})
        .unwrap();
    session.tokens()[prompt_len..]
        .iter()
        .map(|t| (t.id, t.logprob.unwrap_or(f32::NAN)))
        .collect()
}

#[test]
fn the_converted_weights_predict_what_the_original_predicts() {
    let original = load(&common::default_model());
    let converted = load(converted());
    let mut agree = 0;
    let mut total = 0;
    let mut worst_gap = 0f32;
    for prompt in [
        "Write a Python function that returns the n-th Fibonacci number.",
        "What is the capital of France? Answer in one word.",
        "Count the primes below 30 and list them.",
    ] {
        let a = greedy(&original, prompt, 24);
        let b = greedy(&converted, prompt, 24);
        // Up to the first disagreement both models saw the same context.
        for ((ta, la), (tb, lb)) in a.iter().zip(&b) {
            total += 1;
            if ta != tb {
                break;
            }
            agree += 1;
            worst_gap = worst_gap.max((la - lb).abs());
        }
        eprintln!(
            "{prompt:?}\n  original:  {:?}\n  converted: {:?}",
            original.detokenize(&a.iter().map(|t| t.0).collect::<Vec<_>>()),
            converted.detokenize(&b.iter().map(|t| t.0).collect::<Vec<_>>())
        );
    }
    eprintln!(
        "agreeing greedy tokens: {agree} of {total}; largest log-probability gap {worst_gap}"
    );
    // The converted weights are the original Q4_K_M values rounded to BF16 and then F16, run
    // through F16 kernels instead of Q4_K ones: not the same numbers, the same model.
    assert!(
        agree * 10 >= total * 9,
        "{agree} of {total} greedy tokens agree"
    );
    assert!(
        worst_gap < 0.5,
        "log-probabilities differ by up to {worst_gap}"
    );
}

#[test]
fn the_converted_file_holds_every_tensor_of_the_original() {
    let original = catena_gguf::GgufHeader::read(&common::default_model()).unwrap();
    let converted = catena_gguf::GgufHeader::read(converted()).unwrap();
    converted.check_data_present().unwrap();
    let shapes = |h: &catena_gguf::GgufHeader| -> HashMap<String, Vec<u64>> {
        h.tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone()))
            .collect()
    };
    assert_eq!(shapes(&converted), shapes(&original));
    for key in [
        "qwen2.block_count",
        "qwen2.context_length",
        "qwen2.embedding_length",
        "qwen2.feed_forward_length",
        "qwen2.attention.head_count",
        "qwen2.attention.head_count_kv",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        assert_eq!(converted.get_u64(key), original.get_u64(key), "{key}");
    }
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.chat_template",
    ] {
        assert_eq!(converted.get_str(key), original.get_str(key), "{key}");
    }
    assert_eq!(converted.file_type(), Some("model"));
    assert_eq!(
        converted.get_u64("general.file_type"),
        Some(1),
        "mostly F16"
    );
}

#[test]
fn an_imported_checkpoint_is_installed_quantised_and_runs_a_code_task() {
    let name = format!("catena-test-import-{}", std::process::id());
    let file = format!("{name}-Q4_K_M.gguf");
    let checkpoint = checkpoint().to_str().unwrap().to_string();
    let output = common::catena(&["models", "import", &checkpoint, "--name", &name]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "import failed: {stderr}");
    for stage in ["convert: done", "quantising to Q4_K_M", "quantise: done"] {
        assert!(stderr.contains(stage), "{stage:?} missing: {stderr}");
    }
    let installed = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(installed.ends_with(&file), "{installed:?}");
    // Nothing of the stages is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(installed.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".import-{name}"))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let header = catena_gguf::GgufHeader::read(&installed).unwrap();
    assert_eq!(header.get_u64("general.file_type"), Some(15), "Q4_K_M");

    let listed = common::catena(&["models", "list", "--json"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&file));
    let again = common::catena(&["models", "import", &checkpoint, "--name", &name]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already installed"));

    let run = common::catena(&[
        "run",
        "--model",
        &file,
        "--profile",
        "math",
        "--json",
        "--seed",
        "11",
        "--max-tokens",
        "48",
        "--prefill",
        "<plan>compute it</plan>\n<think>use code</think>\n<code>\n```py\nprint(2**100)\n```\n</code>",
        "What is 2 to the power 100?",
    ]);
    let removed = common::catena(&["models", "rm", &file]);
    let observation = common::first_observation(&run);
    assert!(
        observation.contains("1267650600228229401496703205376"),
        "{observation}"
    );
    assert!(removed.status.success());
}

#[test]
fn a_checkpoint_of_another_architecture_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures": ["MambaForCausalLM"], "num_hidden_layers": 2}"#,
    )
    .unwrap();
    let output = common::catena(&["models", "import", dir.path().to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("MambaForCausalLM is not supported"),
        "{stderr}"
    );
}

#[test]
fn a_checkpoint_imported_under_a_catalog_id_is_that_catalog_model() {
    let dir = tempfile::tempdir().unwrap();
    let catena = |args: &[&str]| {
        std::process::Command::new(common::catena_bin())
            .args(args)
            .env("CATENA_DATA_DIR", dir.path())
            .env("CATENA_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let checkpoint = checkpoint().to_str().unwrap().to_string();
    let import = catena(&[
        "models",
        "import",
        &checkpoint,
        "--name",
        "afm-code-7b-sft",
        "--quant",
        "Q8_0",
    ]);
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    let list = catena(&["models", "list", "--json"]);
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "afm-code-7b-sft:Q8_0")
        .unwrap_or_else(|| panic!("not listed: {rows}"));
    assert_eq!(row["installed"], true, "{row}");
    let pull = catena(&["models", "pull", "afm-code-7b-sft:Q8_0"]);
    assert!(pull.status.success());
    assert!(String::from_utf8_lossy(&pull.stderr).contains("Already installed"));
}
