//! Untrusted bytes as a checkpoint's `config.json` and `tokenizer.json`: the converter's reader
//! and its range checks must return an error or the checked metadata, never panic, loop or
//! allocate without bound (libFuzzer's `-rss_limit_mb` catches a large allocation).
//!
//! Two shapes of input, picked by the first byte: the two files' bytes as they are, split at the
//! first NUL (valid JSON never holds one); or a valid Qwen2 configuration whose counts and rates
//! the input chooses, so every number reaches the range checks and the vocabulary's padding,
//! not only the few that survive random JSON.
#![no_main]

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// The fields whose numbers the structured input sets.
const COUNTS: [&str; 11] = [
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "max_position_embeddings",
    "head_dim",
    "bos_token_id",
    "eos_token_id",
    "original_max_position_embeddings",
];
const RATES: [&str; 2] = ["rope_theta", "rms_norm_eps"];

fn template() -> (Value, Value) {
    let config = json!({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "vocab_size": 8, "bos_token_id": 5, "eos_token_id": 6
    });
    let tokenizer = json!({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
        "added_tokens": [
            {"id": 5, "content": "<|endoftext|>", "special": true},
            {"id": 6, "content": "<|im_end|>", "special": true}
        ],
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}},
        "post_processor": {"type": "ByteLevel"}
    });
    (config, tokenizer)
}

/// A number for a count: mostly small (where the interesting boundaries are), sometimes any.
fn count(u: &mut Unstructured) -> Option<Value> {
    Some(match u.int_in_range(0u8..=4).ok()? {
        0 => Value::Null,
        1 => json!(u.int_in_range(0u64..=4096).ok()?),
        2 => json!(u.arbitrary::<u64>().ok()?),
        3 => json!(u.arbitrary::<i64>().ok()?),
        _ => json!(u.arbitrary::<f64>().ok()?),
    })
}

fn structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (mut config, mut tokenizer) = template();
    for field in COUNTS {
        if u.arbitrary::<bool>().unwrap_or(false)
            && let Some(value) = count(&mut u)
        {
            if field == "original_max_position_embeddings" {
                config["rope_scaling"] = json!({"type": "yarn", "factor": 4.0});
                config["rope_scaling"][field] = value;
            } else {
                config[field] = value;
            }
        }
    }
    for field in RATES {
        if u.arbitrary::<bool>().unwrap_or(false)
            && let Ok(rate) = u.arbitrary::<f64>()
        {
            config[field] = json!(rate);
        }
    }
    // A token id the input picks, possibly far beyond the vocabulary.
    if u.arbitrary::<bool>().unwrap_or(false)
        && let Ok(id) = u.arbitrary::<u64>()
    {
        tokenizer["model"]["vocab"]["far"] = json!(id);
    }
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let tokenizer = serde_json::to_vec(&tokenizer).unwrap_or_default();
    let _ = catena_convert::check_metadata(&config, &tokenizer);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let (config, tokenizer) = match rest.iter().position(|&b| b == 0) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &b"{}"[..]),
        };
        let _ = catena_convert::check_metadata(config, tokenizer);
    } else {
        structured(rest);
    }
});
