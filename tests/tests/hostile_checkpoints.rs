//! Hostile numbers in checkpoints and adapters against the real `catena` binary: a
//! `config.json` whose counts are out of what llama.cpp and the converter accept (a vocabulary
//! of 2^40 or 2^62 ids, no hidden width, no key/value heads, a context of 2^32 - 1, four billion
//! layers), and a PEFT adapter whose rank is 10^12. Each used to abort, panic or install a model
//! that no load survives; each must now fail at once with the field, its value and the accepted
//! range, exit with an ordinary error status, and leave nothing installed or half-written. So
//! must two checkpoints whose names collide where llama.cpp reads them: a layer numbered `00`
//! beside layer `0`, and an added token spelled like another id's (llama.cpp aborts every load
//! of a vocabulary with a token twice).
//!
//! And hostile chat templates, which a checkpoint's `tokenizer_config.json` carries into the
//! model file and `catena serve` runs for every request with tools: one that asks for a terabyte
//! while it renders, one that loops, one that asks for 100 GB while it compiles. Each used to
//! abort the server or hold a thread; each must now cost its request a clear error, and the
//! server must go on answering.
//!
//! And what such a model writes is untrusted too: a toy whose template knows no tools answers a
//! forced call in Catena's `{"tool_calls": [...]}` envelope, and the official OpenAI client must
//! add up the same arguments streamed as it gets whole.
//!
//! The checkpoint is a toy Qwen2 written here (one layer, 64 wide, a byte-level vocabulary of
//! 260 tokens), so the tests need no model download and take seconds; a valid copy of it is
//! imported first, so every refusal below is the number's doing.

mod common;

use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Longest one command may take: refusing a number takes milliseconds, and an import of the
/// toy a fraction of a second; a hang (the old code filled 6.8 GB in 40 s through the server
/// before anyone stopped it) fails the test instead of holding it.
const PATIENCE: Duration = Duration::from_secs(60);

const HIDDEN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const FEED_FORWARD: usize = 128;
/// 256 byte tokens, one merge, three added tokens.
const VOCAB: usize = 260;

/// Qwen2's splitting regex, as its `tokenizer.json` gives it.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The byte-level BPE alphabet: the character each byte is written as.
fn byte_chars() -> Vec<char> {
    let mut unprintable = 0;
    (0u32..256)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            let code = if printable {
                b
            } else {
                unprintable += 1;
                255 + unprintable
            };
            char::from_u32(code).unwrap()
        })
        .collect()
}

/// Writes a safetensors file of F32 tensors `(name, shape)`, filled with small deterministic
/// values (norms with ones).
fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>)]) {
    let mut header = Map::new();
    let mut data = Vec::new();
    for (name, shape) in tensors {
        let start = data.len();
        let elements: usize = shape.iter().product();
        for i in 0..elements {
            let value = if name.contains("norm") {
                1.0f32
            } else {
                ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.1
            };
            data.extend_from_slice(&value.to_le_bytes());
        }
        header.insert(
            name.clone(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(&data);
    std::fs::write(path, file).unwrap();
}

/// The toy Qwen2 checkpoint in `dir`, its config.json as given.
fn write_checkpoint(dir: &Path, config: &Value) {
    write_checkpoint_with(dir, config, Vec::new());
}

/// [`write_checkpoint`] with `extra` tensors after the toy's own.
fn write_checkpoint_with(dir: &Path, config: &Value, extra: Vec<(String, Vec<usize>)>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut vocab = Map::new();
    for (id, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    vocab.insert("\u{120}t".into(), json!(256));
    let added: Vec<Value> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .iter()
        .enumerate()
        .map(|(i, content)| json!({"id": 257 + i, "content": content, "special": true}))
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    let tokenizer = json!({
        "added_tokens": added,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": false},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "vocab": vocab, "merges": ["\u{120} t"]},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tokenizer_config =
        json!({"bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"});
    std::fs::write(
        dir.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
    .unwrap();
    let head_dim = HIDDEN / HEADS;
    let kv = KV_HEADS * head_dim;
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".to_string(), vec![HIDDEN]),
    ];
    for (name, shape) in [
        ("input_layernorm.weight", vec![HIDDEN]),
        ("post_attention_layernorm.weight", vec![HIDDEN]),
        ("self_attn.q_proj.weight", vec![HIDDEN, HIDDEN]),
        ("self_attn.q_proj.bias", vec![HIDDEN]),
        ("self_attn.k_proj.weight", vec![kv, HIDDEN]),
        ("self_attn.k_proj.bias", vec![kv]),
        ("self_attn.v_proj.weight", vec![kv, HIDDEN]),
        ("self_attn.v_proj.bias", vec![kv]),
        ("self_attn.o_proj.weight", vec![HIDDEN, HIDDEN]),
        ("mlp.gate_proj.weight", vec![FEED_FORWARD, HIDDEN]),
        ("mlp.up_proj.weight", vec![FEED_FORWARD, HIDDEN]),
        ("mlp.down_proj.weight", vec![HIDDEN, FEED_FORWARD]),
    ] {
        tensors.push((format!("model.layers.0.{name}"), shape));
    }
    tensors.extend(extra);
    write_safetensors(&dir.join("model.safetensors"), &tensors);
}

/// The toy's config.json: every number inside the accepted ranges.
fn valid_config() -> Value {
    json!({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": HIDDEN, "intermediate_size": FEED_FORWARD,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "num_hidden_layers": 1,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "vocab_size": VOCAB, "tie_word_embeddings": true, "bos_token_id": 257,
        "eos_token_id": 259, "torch_dtype": "float32"
    })
}

/// A data folder of this test's own (models, adapters), with the shared cache.
struct Data {
    dir: tempfile::TempDir,
}

/// What a bounded command left: its status and what it printed on stderr.
struct Finished {
    status: ExitStatus,
    stderr: String,
    stdout: String,
}

impl Data {
    fn new() -> Data {
        Data {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(common::catena_bin());
        cmd.env("CATENA_DATA_DIR", self.path())
            .env("CATENA_CACHE_DIR", self.path().join("cache"))
            .env("CATENA_STORE_DIR", self.path().join("sessions"));
        cmd
    }

    /// Runs `catena args`, killed (and the test failed) if it outlasts [`PATIENCE`]. Output
    /// goes to files, so a chatty child never blocks on a full pipe while it is waited for.
    fn catena(&self, args: &[&str]) -> Finished {
        let logs = tempfile::tempdir().unwrap();
        let (out, err) = (logs.path().join("out"), logs.path().join("err"));
        let mut child = common::Reaped(
            self.command()
                .args(args)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .unwrap(),
        );
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "catena {args:?} still running after {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Finished {
            status,
            stderr: std::fs::read_to_string(&err).unwrap(),
            stdout: std::fs::read_to_string(&out).unwrap(),
        }
    }

    fn installed(&self) -> Vec<String> {
        common::installed_files(self.command())
    }

    /// The names in the models folder, hidden stage files included, that contain `part`.
    fn models_named(&self, part: &str) -> Vec<String> {
        std::fs::read_dir(self.path().join("models"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|f| f.contains(part))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Imports the checkpoint in `dir` as `name`.
    fn import(&self, dir: &Path, name: &str) -> Finished {
        self.catena(&[
            "models",
            "import",
            dir.to_str().unwrap(),
            "--name",
            name,
            "--quant",
            "Q8_0",
            "--threads",
            "2",
        ])
    }
}

/// Fails unless `finished` is an orderly refusal: exit status 1 (a panic is 101, an abort a
/// signal with no code) and `needles` in the message.
fn assert_refused(finished: &Finished, what: &str, needles: &[&str]) {
    assert_eq!(
        finished.status.code(),
        Some(1),
        "{what}: not an orderly error ({:?}): {}",
        finished.status,
        finished.stderr
    );
    for needle in needles {
        assert!(
            finished.stderr.contains(needle),
            "{what}: no `{needle}` in: {}",
            finished.stderr
        );
    }
}

#[test]
fn checkpoints_with_hostile_numbers_or_names_fail_fast_and_install_nothing() {
    let data = Data::new();
    let work = tempfile::tempdir().unwrap();

    // The toy as it is imports: what follows is refused for its numbers alone.
    let valid = work.path().join("valid");
    write_checkpoint(&valid, &valid_config());
    let imported = data.import(&valid, "toy");
    assert!(imported.status.success(), "{}", imported.stderr);
    assert_eq!(data.installed(), ["toy-Q8_0.gguf"]);

    let cases: [(&str, Value, &[&str]); 7] = [
        (
            "vocab_size",
            json!(1u64 << 40),
            &["`vocab_size` is 1099511627776", "1 to 1048576"],
        ),
        (
            "vocab_size",
            json!(1u64 << 62),
            &["`vocab_size` is 4611686018427387904", "1 to 1048576"],
        ),
        (
            "hidden_size",
            json!(0),
            &["`hidden_size` is 0", "1 to 262144"],
        ),
        (
            "num_key_value_heads",
            json!(0),
            &["`num_key_value_heads` is 0", "1 to 4"],
        ),
        (
            "max_position_embeddings",
            json!(4_294_967_295u64),
            &["`max_position_embeddings` is 4294967295", "1 to 2147483647"],
        ),
        (
            "num_hidden_layers",
            json!(4_000_000_000u64),
            &["`num_hidden_layers` is 4000000000", "1 to 512"],
        ),
        // Inside the range, but not the embedding's rows: llama.cpp would refuse every load.
        (
            "vocab_size",
            json!(300),
            &["model.embed_tokens.weight", "has the shape [260, 64]"],
        ),
    ];
    for (i, (field, value, needles)) in cases.into_iter().enumerate() {
        let what = format!("{field} = {value}");
        let mut config = valid_config();
        config[field] = value;
        let dir = work.path().join(format!("hostile-{i}"));
        write_checkpoint(&dir, &config);
        let name = format!("hostile-{i}");
        let refused = data.import(&dir, &name);
        assert_refused(&refused, &what, needles);
        assert!(
            refused.stderr.contains("config.json") || refused.stderr.contains("has the shape"),
            "{what}: the message names no file: {}",
            refused.stderr
        );
        assert_eq!(data.installed(), ["toy-Q8_0.gguf"], "{what}");
        let left = data.models_named(&name);
        assert!(left.is_empty(), "{what} left {left:?}");
    }

    // Layer "00" was layer 0 again: two tensors written as one of llama.cpp's. A layer number
    // has one spelling, and the rest are refused before anything is written.
    let dir = work.path().join("twice");
    let again = (
        "model.layers.00.input_layernorm.weight".to_string(),
        vec![HIDDEN],
    );
    write_checkpoint_with(&dir, &valid_config(), vec![again]);
    let refused = data.import(&dir, "twice");
    assert_refused(
        &refused,
        "a layer named twice",
        &["`model.layers.00.input_layernorm.weight` is not part of"],
    );
    assert_eq!(data.installed(), ["toy-Q8_0.gguf"]);
    let left = data.models_named("twice");
    assert!(left.is_empty(), "a layer named twice left {left:?}");

    // An added token spelled like another id's: llama.cpp aborts on loading such a vocabulary,
    // so the model installed before took down every process that loaded it.
    let dir = work.path().join("token-twice");
    write_checkpoint(&dir, &valid_config());
    let path = dir.join("tokenizer.json");
    let mut tokenizer: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let again = json!({"id": 256, "content": "<|im_end|>", "special": true});
    tokenizer["added_tokens"]
        .as_array_mut()
        .unwrap()
        .push(again);
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let refused = data.import(&dir, "token-twice");
    assert_refused(
        &refused,
        "a token twice",
        &["the ids 256 and 259 are both the token \"<|im_end|>\""],
    );
    assert_eq!(data.installed(), ["toy-Q8_0.gguf"]);
    let left = data.models_named("token-twice");
    assert!(left.is_empty(), "a token twice left {left:?}");
}

/// A PEFT adapter folder for the toy: `q_proj` factors of rank 4 on its one layer, and
/// adapter_config.json as given.
fn write_adapter(dir: &Path, config: &Value) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
    let key =
        |factor: &str| format!("base_model.model.model.layers.0.self_attn.q_proj.{factor}.weight");
    write_safetensors(
        &dir.join("adapter_model.safetensors"),
        &[
            (key("lora_A"), vec![4, HIDDEN]),
            (key("lora_B"), vec![HIDDEN, 4]),
        ],
    );
}

fn adapter_config(r: Value, alpha: Value) -> Value {
    json!({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
        "target_modules": ["q_proj"], "use_rslora": false, "bias": "none"
    })
}

#[test]
fn an_adapter_with_a_hostile_rank_fails_fast_and_leaves_no_folder() {
    let data = Data::new();
    let work = tempfile::tempdir().unwrap();
    let checkpoint = work.path().join("toy");
    write_checkpoint(&checkpoint, &valid_config());
    let imported = data.import(&checkpoint, "toy");
    assert!(imported.status.success(), "{}", imported.stderr);
    let base = PathBuf::from(imported.stdout.trim());
    assert!(base.is_file(), "{}", imported.stdout);
    let import_adapter = |dir: &Path, name: &str| {
        data.catena(&[
            "models",
            "import-adapter",
            dir.to_str().unwrap(),
            "--base",
            base.to_str().unwrap(),
            "--name",
            name,
        ])
    };
    let adapters = data.path().join("adapters");

    // A valid adapter of the same shape imports and llama.cpp applies it.
    let valid = work.path().join("valid-adapter");
    write_adapter(&valid, &adapter_config(json!(4), json!(8)));
    let accepted = import_adapter(&valid, "valid");
    assert!(accepted.status.success(), "{}", accepted.stderr);
    assert!(adapters.join("valid/adapter.gguf").is_file());

    for (i, (r, alpha, needles)) in [
        (
            json!(1_000_000_000_000u64),
            json!(16),
            ["`r` is 1000000000000", "a whole number from 1 to"],
        ),
        (json!(4), json!(1e39), ["`lora_alpha` is 1e+39", "positive"]),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("r = {r}, lora_alpha = {alpha}");
        let dir = work.path().join(format!("hostile-adapter-{i}"));
        write_adapter(&dir, &adapter_config(r, alpha));
        let name = format!("hostile-{i}");
        let refused = import_adapter(&dir, &name);
        assert_refused(&refused, &what, &needles);
        assert!(
            refused.stderr.contains("adapter_config.json"),
            "{what}: {}",
            refused.stderr
        );
        assert!(
            !adapters.join(&name).exists(),
            "{what} left {}",
            adapters.join(&name).display()
        );
    }
}

/// Sets the chat template of the checkpoint in `dir`.
fn with_chat_template(dir: &Path, template: &str) {
    let path = dir.join("tokenizer_config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["chat_template"] = json!(template);
    std::fs::write(&path, config.to_string()).unwrap();
}

/// ChatML, unless the first tool offered is `grow` (a string doubled 40 times: a terabyte) or
/// `spin` (ten billion steps of a loop).
const TRAPPED_TEMPLATE: &str = "{%- if tools and tools[0].function.name == 'grow' -%}\
    {%- set ns = namespace(s='x') -%}\
    {%- for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor -%}\
    {{ ns.s | length }}\
    {%- elif tools and tools[0].function.name == 'spin' -%}\
    {%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor -%}\
    {%- endif -%}\
    {%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}\
    <|im_start|>assistant\n";

/// 100 GB asked for by a constant expression, which minijinja folds while compiling.
const FOLDED_TEMPLATE: &str = "{{ 'x' * 100000000000 }}\
    {%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}\
    <|im_start|>assistant\n";

/// A `catena serve` of the model file `model`, with the model's id.
struct ToyServer {
    process: common::Reaped,
    base: String,
    model: String,
}

impl ToyServer {
    fn start(data: &Data, model: &Path) -> ToyServer {
        let mut child = data
            .command()
            .args(["serve", "--port", "0", "--model"])
            .arg(model)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let base = common::served_address(&line);
        let models: Value = http()
            .get(format!("{base}/v1/models"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let model = models["data"][0]["id"].as_str().unwrap().to_string();
        ToyServer {
            process: common::Reaped(child),
            base,
            model,
        }
    }

    /// A chat request offering the tool `tool` (none: a plain chat): its status and body.
    fn chat(&self, tool: Option<&str>) -> (u16, Value) {
        let mut body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        });
        if let Some(name) = tool {
            body["tools"] = json!([{"type": "function", "function": {
                "name": name, "parameters": {"type": "object", "properties": {}}}}]);
        }
        let response = http()
            .post(format!("{}/v1/chat/completions", self.base))
            .json(&body)
            .send()
            .unwrap();
        (response.status().as_u16(), response.json().unwrap())
    }

    /// Fails unless the server process is still running.
    fn assert_alive(&mut self) {
        assert!(
            self.process.0.try_wait().unwrap().is_none(),
            "the server stopped"
        );
    }
}

fn http() -> reqwest::blocking::Client {
    common::http_client(PATIENCE)
}

/// The error message of an API error body.
fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[test]
fn hostile_chat_templates_cost_their_request_not_the_server() {
    let data = Data::new();
    let work = tempfile::tempdir().unwrap();
    for (name, template) in [("trapped", TRAPPED_TEMPLATE), ("folded", FOLDED_TEMPLATE)] {
        let dir = work.path().join(name);
        write_checkpoint(&dir, &valid_config());
        with_chat_template(&dir, template);
        let imported = data.import(&dir, name);
        assert!(imported.status.success(), "{}", imported.stderr);
    }
    let models = data.path().join("models");

    let mut server = ToyServer::start(&data, &models.join("trapped-Q8_0.gguf"));
    let (status, body) = server.chat(Some("grow"));
    assert_eq!(status, 400, "{body}");
    assert!(
        message(&body).contains("more than the 256 MiB of memory a render may take"),
        "{body}"
    );
    server.assert_alive();
    let (status, body) = server.chat(Some("spin"));
    assert_eq!(status, 400, "{body}");
    assert!(
        message(&body).contains("ran past its budget of 10000000 steps"),
        "{body}"
    );
    server.assert_alive();
    // The same template with another tool, and a plain chat, are answered as before.
    let (status, body) = server.chat(Some("get_time"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = server.chat(None);
    assert_eq!(status, 200, "{body}");
    server.assert_alive();
    drop(server);

    // A template that cannot even be compiled: the server starts, says so for requests with
    // tools, and answers the rest.
    let mut server = ToyServer::start(&data, &models.join("folded-Q8_0.gguf"));
    let (status, body) = server.chat(Some("get_time"));
    assert_eq!(status, 400, "{body}");
    assert!(
        message(&body).contains("Tools need the model's chat template, which cannot be used")
            && message(&body).contains("256 MiB"),
        "{body}"
    );
    let (status, body) = server.chat(None);
    assert_eq!(status, 200, "{body}");
    server.assert_alive();
}

/// ChatML with no word of tools: such a template's calls are asked for, and read, as a JSON
/// envelope (docs/ARCHITECTURE.md, "Function calling").
const TOOLLESS_TEMPLATE: &str = "{%- for m in messages %}<|im_start|>{{ m.role }}\n\
    {{ m.content }}<|im_end|>\n{% endfor -%}<|im_start|>assistant\n";

#[test]
fn a_template_without_tools_streams_calls_that_add_up_to_the_whole_answer() {
    let data = Data::new();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("toolless");
    write_checkpoint(&dir, &valid_config());
    with_chat_template(&dir, TOOLLESS_TEMPLATE);
    let imported = data.import(&dir, "toolless");
    assert!(imported.status.success(), "{}", imported.stderr);
    let server = ToyServer::start(&data, &data.path().join("models/toolless-Q8_0.gguf"));
    // Before, the stream sent the envelope's arguments as written (`{"zone": "UTC"}`, a piece at
    // a time while the envelope was open), and the whole answer respaced them.
    let script = common::package_dir().join("python/openai_tools.py");
    let output = Command::new(common::test_python())
        .arg(&script)
        .arg(format!("{}/v1", server.base))
        .args([
            server.model.as_str(),
            "no-key",
            "streamed_call_matches_whole",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_str(&out).unwrap();
    assert!(
        out["passed"]["streamed_call_matches_whole"]["pieces"].as_u64() >= Some(1),
        "{out}"
    );
}
