//! A real model in the Hugging Face layout, made once per machine from the default model.
//!
//! No published checkpoint can be fetched here, so the tests make one from the default model
//! (Qwen2.5-Coder-0.5B-Instruct, the backbone family of every AFM): its GGUF is dequantised
//! (candle) and written as a Qwen2 checkpoint the way the hub publishes them: BF16 safetensors in
//! two shards with an index, `config.json`, a byte-level BPE `tokenizer.json` with Qwen2's
//! pre-tokenizer, `tokenizer_config.json` with the chat template. It is kept in the cache
//! directory, outside the clone. Included by the tests that need it (`#[path]`), after `common`.

use super::common;
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use serde_json::{Map, Value, json};
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
pub fn checkpoint() -> &'static Path {
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
