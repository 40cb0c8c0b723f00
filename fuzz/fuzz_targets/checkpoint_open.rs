//! A whole checkpoint folder as a hub or a mirror serves it: `catena_convert::open` must refuse
//! it with its reason or accept it, never panic, loop or allocate without bound; and a checkpoint
//! it accepts must convert into a GGUF file that Catena's own reader finds usable, every tensor
//! in it once (what llama.cpp will then load).
//!
//! Two shapes of input, picked by the first byte: the rest of the bytes as `model.safetensors`
//! beside the toy's configuration and tokenizer; or the toy's own tensors (a Qwen2, Qwen3 or
//! Llama of one or two layers) with changes the input picks for each (left out, another shape,
//! type, name or length of data), its data the input's bytes, sometimes split over two shards
//! with an index that may misplace one. The folder is written under /dev/shm (or the temporary
//! folder) for each input, one folder per fuzzing process.
#![no_main]

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const HIDDEN: u64 = 8;
const HEADS: u64 = 2;
const KV_HEADS: u64 = 1;
const HEAD_DIM: u64 = 4;
const FEED_FORWARD: u64 = 16;
const VOCAB: u64 = 8;

/// The architectures the converter writes, by their class names.
const CLASSES: [&str; 3] = ["Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"];
/// Element types a safetensors header may name, the converter's three first.
const DTYPES: [&str; 7] = ["F32", "F16", "BF16", "I8", "F64", "U8", "BOOL"];
/// Other spellings of a layer's prefix: another number, or layer 0 spelled otherwise.
const LAYER_SPELLINGS: [&str; 5] = [
    "layers.1.",
    "layers.2.",
    "layers.00.",
    "layers.+0.",
    "layers.01.",
];
/// Tensors a checkpoint may hold beside the toy's own.
const EXTRA: [&str; 4] = [
    "lm_head.weight",
    "model.layers.0.self_attn.rotary_emb.inv_freq",
    "model.layers.0.mlp.gate_proj.bias",
    "model.layers.0.self_attn.o_proj.bias",
];

/// The folder each input is written to, one per fuzzing process.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("catena-fuzz-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    })
}

fn tokenizer() -> Value {
    json!({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
        "added_tokens": [
            {"id": 5, "content": "<|endoftext|>", "special": true},
            {"id": 6, "content": "<|im_end|>", "special": true}
        ],
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}},
        "post_processor": {"type": "ByteLevel"}
    })
}

fn config(class: &str, layers: u64, tied: bool) -> Value {
    json!({
        "architectures": [class], "hidden_size": HIDDEN, "intermediate_size": FEED_FORWARD,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "num_hidden_layers": layers, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "vocab_size": VOCAB, "tie_word_embeddings": tied,
        "bos_token_id": 5, "eos_token_id": 6
    })
}

/// The toy's tensors: names and shapes, row-major.
fn toy(class: &str, layers: u64, tied: bool) -> Vec<(String, Vec<u64>)> {
    let (query, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".to_string(), vec![HIDDEN]),
    ];
    if !tied {
        tensors.push(("lm_head.weight".to_string(), vec![VOCAB, HIDDEN]));
    }
    for layer in 0..layers {
        let mut parts = vec![
            ("input_layernorm.weight", vec![HIDDEN]),
            ("post_attention_layernorm.weight", vec![HIDDEN]),
            ("self_attn.q_proj.weight", vec![query, HIDDEN]),
            ("self_attn.k_proj.weight", vec![kv, HIDDEN]),
            ("self_attn.v_proj.weight", vec![kv, HIDDEN]),
            ("self_attn.o_proj.weight", vec![HIDDEN, query]),
            ("mlp.gate_proj.weight", vec![FEED_FORWARD, HIDDEN]),
            ("mlp.up_proj.weight", vec![FEED_FORWARD, HIDDEN]),
            ("mlp.down_proj.weight", vec![HIDDEN, FEED_FORWARD]),
        ];
        match class {
            "Qwen2ForCausalLM" => parts.extend([
                ("self_attn.q_proj.bias", vec![query]),
                ("self_attn.k_proj.bias", vec![kv]),
                ("self_attn.v_proj.bias", vec![kv]),
            ]),
            "Qwen3ForCausalLM" => parts.extend([
                ("self_attn.q_norm.weight", vec![HEAD_DIM]),
                ("self_attn.k_norm.weight", vec![HEAD_DIM]),
            ]),
            _ => {}
        }
        for (part, shape) in parts {
            tensors.push((format!("model.layers.{layer}.{part}"), shape));
        }
    }
    tensors
}

/// One tensor as it goes into a safetensors file.
struct Entry {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn element_bytes(dtype: &str) -> u64 {
    match dtype {
        "F64" => 8,
        "F32" => 4,
        "F16" | "BF16" => 2,
        _ => 1,
    }
}

/// The toy's tensor changed as the input says, or `None` when it is left out.
fn changed(u: &mut Unstructured, name: String, shape: Vec<u64>) -> Option<Entry> {
    let mut entry = Entry {
        name,
        dtype: DTYPES[u.int_in_range(0..=2).unwrap_or(0)],
        shape,
        data: Vec::new(),
    };
    let mut extra_bytes: i64 = 0;
    // Most tensors are kept as they are (an input that runs out keeps the rest).
    match u.int_in_range(0u8..=15).unwrap_or(0) {
        10 => return None,
        11 => {
            let at = u.choose_index(entry.shape.len()).unwrap_or(0);
            let value = u64::from(u.arbitrary::<u8>().unwrap_or(0));
            match entry.shape.get_mut(at) {
                Some(dim) => *dim = value,
                None => entry.shape.push(value),
            }
        }
        12 => entry.shape.push(1),
        13 => entry.dtype = DTYPES[u.choose_index(DTYPES.len()).unwrap_or(0)],
        14 => {
            let spelling = LAYER_SPELLINGS[u.choose_index(LAYER_SPELLINGS.len()).unwrap_or(0)];
            entry.name = entry.name.replacen("layers.0.", spelling, 1);
        }
        15 => entry.name = entry.name.replace(".weight", ".bias"),
        9 => extra_bytes = i64::from(u.int_in_range(-3i8..=3).unwrap_or(1)),
        _ => {}
    }
    let elements: u64 = entry.shape.iter().product();
    let len = (elements * element_bytes(entry.dtype)).saturating_add_signed(extra_bytes);
    entry.data = (0..len).map(|_| u.arbitrary::<u8>().unwrap_or(0)).collect();
    Some(entry)
}

/// Writes `entries` as one safetensors file, offsets following the data as it is.
fn write_safetensors(path: &Path, entries: &[Entry]) {
    let mut header = Map::new();
    let mut data = Vec::new();
    for entry in entries {
        let start = data.len();
        data.extend_from_slice(&entry.data);
        header.insert(
            entry.name.clone(),
            json!({"dtype": entry.dtype, "shape": entry.shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&header).expect("JSON");
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(&data);
    std::fs::write(path, file).expect("a scratch file");
}

/// Writes the structured checkpoint the input describes into `dir`: its shape first, then each
/// tensor's changes and data.
fn write_structured(dir: &Path, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let class = CLASSES[u.choose_index(CLASSES.len()).unwrap_or(0)];
    let layers = u.int_in_range(1u64..=2).unwrap_or(1);
    let tied = u.arbitrary::<bool>().unwrap_or(true);
    let mut config = config(class, layers, tied);
    if u.arbitrary::<bool>().unwrap_or(false) {
        let fields = [
            "num_attention_heads",
            "num_key_value_heads",
            "hidden_size",
            "head_dim",
            "num_hidden_layers",
        ];
        let field = fields[u.choose_index(fields.len()).unwrap_or(0)];
        config[field] = json!(u.int_in_range(0u8..=16).unwrap_or(0));
    }
    let extra = u
        .arbitrary::<bool>()
        .unwrap_or(false)
        .then(|| EXTRA[u.choose_index(EXTRA.len()).unwrap_or(0)]);
    let sharded = u.arbitrary::<bool>().unwrap_or(false);
    let misplaced = u.arbitrary::<bool>().unwrap_or(false);
    let cut = u.arbitrary::<u8>().unwrap_or(0);
    let mut entries: Vec<Entry> = toy(class, layers, tied)
        .into_iter()
        .filter_map(|(name, shape)| changed(&mut u, name, shape))
        .collect();
    if let Some(name) = extra {
        entries.extend(changed(&mut u, name.to_string(), vec![VOCAB, HIDDEN]));
    }
    std::fs::write(dir.join("config.json"), config.to_string()).expect("a scratch file");
    std::fs::write(dir.join("tokenizer.json"), tokenizer().to_string()).expect("a scratch file");
    if !sharded || entries.len() < 2 {
        write_safetensors(&dir.join("model.safetensors"), &entries);
        return;
    }
    let second = entries.split_off(1 + usize::from(cut) % (entries.len() - 1));
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut map = Map::new();
    for (shard, list) in shards.iter().zip([&entries, &second]) {
        for entry in list.iter() {
            map.insert(entry.name.clone(), json!(shard));
        }
    }
    // An index that sends one tensor to the other shard.
    if misplaced {
        map.insert(entries[0].name.clone(), json!(shards[1]));
    }
    write_safetensors(&dir.join(shards[0]), &entries);
    write_safetensors(&dir.join(shards[1]), &second);
    let index = json!({"weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string())
        .expect("a scratch file");
}

/// Converts the checkpoint in `dir` when the converter accepts it, and checks what it wrote.
fn convert(dir: &Path) {
    let Ok(mut checkpoint) = catena_convert::open(dir) else {
        return;
    };
    let out = dir.join("out.gguf");
    let written = checkpoint
        .write_f16(&out, "fuzz", &mut |_| {})
        .expect("an accepted checkpoint converts");
    let header = catena_gguf::GgufHeader::read(&out).expect("the converter's file reads back");
    let inspection = catena_gguf::inspect(&out, &header);
    assert!(inspection.usable(), "{:?}", inspection.problems);
    assert_eq!(header.tensors.len(), written.tensors);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = scratch();
    // What the input before left behind.
    if let Ok(files) = std::fs::read_dir(dir) {
        for file in files.flatten() {
            let _ = std::fs::remove_file(file.path());
        }
    }
    if mode % 2 == 0 {
        let write = |name: &str, bytes: &[u8]| {
            std::fs::write(dir.join(name), bytes).expect("a scratch file")
        };
        write(
            "config.json",
            config(CLASSES[0], 1, true).to_string().as_bytes(),
        );
        write("tokenizer.json", tokenizer().to_string().as_bytes());
        write("model.safetensors", rest);
    } else {
        write_structured(dir, rest);
    }
    convert(dir);
});
