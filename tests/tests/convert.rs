//! The checkpoint converter against llama.cpp, on a real model in the Hugging Face layout.
//!
//! No published checkpoint can be fetched here, so the test makes one from the default model
//! (Qwen2.5-Coder-0.5B-Instruct, the backbone family of every AFM): its GGUF is dequantised
//! (candle) and written as a Qwen2 checkpoint the way the hub publishes them: BF16 safetensors in
//! two shards with an index, `config.json`, a byte-level BPE `tokenizer.json` with Qwen2's
//! pre-tokenizer, `tokenizer_config.json` with the chat template. It is built once and kept in the
//! cache directory, outside the clone. Then Catena converts it back and llama.cpp loads the result.

mod common;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine::{GenerateLimits, SamplingParams, Session, SessionOptions, StopMatcher};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Qwen2's splitting regex, as its `tokenizer.json` gives it.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF tensor names back to the Hugging Face ones.
fn hf_name(gguf: &str) -> String {
    let whole = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
    ];
    if let Some((_, hf)) = whole.iter().find(|(g, _)| *g == gguf) {
        return hf.to_string();
    }
    let rest = gguf.strip_prefix("blk.").expect("a block tensor");
    let (block, part) = rest.split_once('.').unwrap();
    let (module, suffix) = part.rsplit_once('.').unwrap();
    let module = match module {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        other => panic!("unexpected tensor {other}"),
    };
    format!("model.layers.{block}.{module}.{suffix}")
}

/// Tensors of one shard: Hugging Face name, shape, BF16 bytes.
type Shard = Vec<(String, Vec<usize>, Vec<u8>)>;

fn write_shard(path: &Path, tensors: &Shard) -> Map<String, Value> {
    let mut header = Map::new();
    let mut offset = 0usize;
    for (name, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        offset += bytes.len();
    }
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let header_bytes = serde_json::to_vec(&header).unwrap();
    let mut file = std::io::BufWriter::new(File::create(path).unwrap());
    use std::io::Write;
    file.write_all(&(header_bytes.len() as u64).to_le_bytes())
        .unwrap();
    file.write_all(&header_bytes).unwrap();
    for (_, _, bytes) in tensors {
        file.write_all(bytes).unwrap();
    }
    file.into_inner().unwrap().sync_all().unwrap();
    header
}

/// Makes the Hugging Face checkpoint of the default model in `dir`.
fn make_checkpoint(gguf: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut file = File::open(gguf).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let meta = &content.metadata;
    let u32_of = |k: &str| meta[k].to_u32().unwrap();
    let f32_of = |k: &str| meta[k].to_f32().unwrap();
    let tokens: Vec<String> = meta["tokenizer.ggml.tokens"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_string().unwrap().clone())
        .collect();
    let types: Vec<i32> = meta["tokenizer.ggml.token_type"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_i32().unwrap())
        .collect();
    let merges: Vec<String> = meta["tokenizer.ggml.merges"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_string().unwrap().clone())
        .collect();
    let bos = u32_of("tokenizer.ggml.bos_token_id");
    let eos = u32_of("tokenizer.ggml.eos_token_id");
    let pad = u32_of("tokenizer.ggml.padding_token_id");

    // Weights: dequantised, as BF16, in two shards.
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tied = !content.tensor_infos.contains_key("output.weight");
    let mut shards: Vec<Shard> = vec![Vec::new(), Vec::new()];
    for (i, name) in names.iter().enumerate() {
        let tensor = content
            .tensor(&mut file, name, &Device::Cpu)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap();
        let shape = tensor.dims().to_vec();
        let values = tensor
            .to_dtype(DType::BF16)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        shards[i % 2].push((hf_name(name), shape, bytes));
    }
    let mut weight_map = Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let file_name = format!("model-0000{}-of-00002.safetensors", i + 1);
        let header = write_shard(&dir.join(&file_name), shard);
        for name in header.keys().filter(|k| *k != "__metadata__") {
            weight_map.insert(name.clone(), json!(file_name));
        }
    }
    let index = json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();

    let config = json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "hidden_size": u32_of("qwen2.embedding_length"),
        "intermediate_size": u32_of("qwen2.feed_forward_length"),
        "max_position_embeddings": u32_of("qwen2.context_length"),
        "num_attention_heads": u32_of("qwen2.attention.head_count"),
        "num_hidden_layers": u32_of("qwen2.block_count"),
        "num_key_value_heads": u32_of("qwen2.attention.head_count_kv"),
        "rms_norm_eps": f32_of("qwen2.attention.layer_norm_rms_epsilon"),
        "rope_theta": f32_of("qwen2.rope.freq_base"),
        "rope_scaling": null,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "vocab_size": tokens.len(),
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();

    // The tokenizer: normal tokens in the BPE vocabulary, control and user-defined ones added;
    // the unused `[PADn]` ids are not the tokenizer's.
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (id, (token, typ)) in tokens.iter().zip(&types).enumerate() {
        match typ {
            1 => {
                vocab.insert(token.clone(), json!(id));
            }
            3 | 4 => added.push(json!({
                "id": id, "content": token, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": *typ == 3,
            })),
            _ => {}
        }
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": false},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges,
        },
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let name_of = |id: u32| tokens[id as usize].clone();
    let tokenizer_config = json!({
        "add_prefix_space": false,
        "bos_token": null,
        "eos_token": name_of(eos),
        "pad_token": name_of(pad),
        "chat_template": meta["tokenizer.chat_template"].to_string().unwrap(),
        "model_max_length": u32_of("qwen2.context_length"),
        "tokenizer_class": "Qwen2Tokenizer",
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_string_pretty(&tokenizer_config).unwrap(),
    )
    .unwrap();
}

/// The checkpoint, made once per machine (under a lock, so test processes do not race).
fn checkpoint() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = common::paths().cache_dir.join("test-checkpoints");
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join("qwen2.5-coder-0.5b-instruct-hf");
        let lock = File::create(root.join(".lock")).unwrap();
        lock.lock().unwrap();
        if !dir.join(".complete").is_file() {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("making the Hugging Face checkpoint of the default model (once)");
            make_checkpoint(&common::default_model(), &dir);
            std::fs::write(dir.join(".complete"), b"").unwrap();
        }
        dir
    })
}

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
    assert!(stderr.contains("Quantised to Q4_K_M"), "{stderr}");
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
    assert!(
        run.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = common::json_lines(&run);
    let observation = events
        .iter()
        .find(|e| e["type"] == "observation")
        .expect("an observation");
    assert!(
        observation["text"]
            .as_str()
            .unwrap()
            .contains("1267650600228229401496703205376"),
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
