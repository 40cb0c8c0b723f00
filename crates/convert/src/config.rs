//! `config.json`: which architecture, and the hyper-parameters llama.cpp reads from a GGUF's
//! `{arch}.*` keys. The keys are looked up under the names Hugging Face configurations use (first
//! match wins, as llama.cpp's own converter does), and written with the GGUF types llama.cpp
//! expects (counts as u32, rates as f32).

use crate::error::ConvertError;
use crate::gguf_writer::Value;
use serde_json::{Map, Value as Json};
use std::path::Path;

/// The architectures this converter writes. Every published AFM is `qwen2`; `qwen3` is the
/// likely next generation; `llama` covers the many Llama-layout fine-tunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Qwen2,
    Qwen3,
    Llama,
}

impl Architecture {
    /// The class name in `config.json`'s `architectures`.
    pub fn from_hf(name: &str) -> Option<Architecture> {
        match name {
            "Qwen2ForCausalLM" => Some(Architecture::Qwen2),
            "Qwen3ForCausalLM" => Some(Architecture::Qwen3),
            "LlamaForCausalLM" => Some(Architecture::Llama),
            _ => None,
        }
    }

    /// `general.architecture`, and the prefix of the hyper-parameter keys.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Llama => "llama",
        }
    }
}

/// What `config.json` says, as far as the conversion needs it.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub architecture: Architecture,
    /// The Hugging Face class name, for messages.
    pub hf_class: String,
    pub block_count: u64,
    pub head_count: u64,
    pub head_count_kv: Option<u64>,
    pub vocab_size: Option<usize>,
    /// Special token ids given in `config.json` (`bos_token_id`, ...), by type.
    pub special_ids: Vec<(String, u64)>,
    /// Bytes per weight element as saved (`torch_dtype`, or `dtype` in newer configurations):
    /// a disk estimate before the weights are downloaded.
    pub source_dtype_bytes: Option<u64>,
    /// The `{arch}.*` keys, in the order they are written.
    pub hyper_parameters: Vec<(String, Value)>,
}

/// Reads `dir/config.json`. An architecture other than the supported ones, or a RoPE scaling
/// this converter does not reproduce, is refused here, before any weight is read.
pub fn read_config(dir: &Path) -> Result<ModelConfig, ConvertError> {
    let path = dir.join("config.json");
    let text = std::fs::read(&path).map_err(ConvertError::io(&path))?;
    let json: Json = serde_json::from_slice(&text)
        .map_err(|e| ConvertError::bad(&path, format!("not valid JSON: {e}")))?;
    let Some(hp) = json.as_object() else {
        return Err(ConvertError::bad(&path, "not a JSON object"));
    };
    parse(hp).map_err(|reason| match reason {
        Problem::Bad(reason) => ConvertError::bad(&path, reason),
        Problem::Unsupported(reason) => ConvertError::Unsupported(reason),
    })
}

enum Problem {
    Bad(String),
    Unsupported(String),
}

/// The first of `keys` present (even when null, as llama.cpp's converter looks them up).
fn find<'a>(hp: &'a Map<String, Json>, keys: &[&str]) -> Option<&'a Json> {
    keys.iter().find_map(|k| hp.get(*k))
}

fn count(hp: &Map<String, Json>, keys: &[&str]) -> Result<Option<u64>, Problem> {
    match find(hp, keys) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| Problem::Bad(format!("`{}` is not a whole number: {v}", keys[0]))),
    }
}

fn rate(hp: &Map<String, Json>, keys: &[&str]) -> Result<Option<f64>, Problem> {
    match find(hp, keys) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| Problem::Bad(format!("`{}` is not a number: {v}", keys[0]))),
    }
}

fn u32_value(key: &str, n: u64) -> Result<Value, Problem> {
    u32::try_from(n)
        .map(Value::U32)
        .map_err(|_| Problem::Bad(format!("`{key}` = {n} is out of range")))
}

fn parse(hp: &Map<String, Json>) -> Result<ModelConfig, Problem> {
    let classes: Vec<&str> = hp
        .get("architectures")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let Some(hf_class) = classes.first() else {
        return Err(Problem::Bad("`architectures` names no model class".into()));
    };
    let Some(architecture) = Architecture::from_hf(hf_class) else {
        return Err(Problem::Unsupported(format!(
            "the architecture {hf_class} is not supported (Catena converts Qwen2ForCausalLM, \
             Qwen3ForCausalLM and LlamaForCausalLM checkpoints)"
        )));
    };
    let arch = architecture.gguf_name();
    let key = |name: &str| format!("{arch}.{name}");
    let mut out: Vec<(String, Value)> = Vec::new();

    let block_count = count(
        hp,
        &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
    )?
    .ok_or_else(|| Problem::Bad("no layer count (`num_hidden_layers`)".into()))?;
    out.push((
        key("block_count"),
        u32_value("num_hidden_layers", block_count)?,
    ));
    let context = count(
        hp,
        &[
            "max_position_embeddings",
            "n_ctx",
            "n_positions",
            "max_length",
            "max_sequence_length",
            "model_max_length",
        ],
    )?;
    if let Some(n) = context {
        out.push((
            key("context_length"),
            u32_value("max_position_embeddings", n)?,
        ));
    }
    let embedding = count(hp, &["hidden_size", "n_embd", "dim"])?;
    if let Some(n) = embedding {
        out.push((key("embedding_length"), u32_value("hidden_size", n)?));
    }
    let feed_forward = count(
        hp,
        &[
            "prefix_dense_intermediate_size",
            "dense_intermediate_size",
            "intermediate_size",
            "n_inner",
            "hidden_dim",
        ],
    )?;
    if let Some(n) = feed_forward {
        out.push((
            key("feed_forward_length"),
            u32_value("intermediate_size", n)?,
        ));
    }
    let head_count = count(hp, &["num_attention_heads", "n_head", "n_heads"])?
        .filter(|&n| n > 0)
        .ok_or_else(|| Problem::Bad("no attention head count (`num_attention_heads`)".into()))?;
    out.push((
        key("attention.head_count"),
        u32_value("num_attention_heads", head_count)?,
    ));
    let head_count_kv = count(hp, &["num_key_value_heads", "n_kv_heads"])?;
    if let Some(n) = head_count_kv {
        out.push((
            key("attention.head_count_kv"),
            u32_value("num_key_value_heads", n)?,
        ));
    }
    if hp.get("is_causal") == Some(&Json::Bool(false)) {
        return Err(Problem::Unsupported(
            "a non-causal (embedding) model is not supported".into(),
        ));
    }

    // RoPE: `rope_parameters` (newer configurations) or `rope_scaling`, with the global theta.
    let rope = hp
        .get("rope_parameters")
        .or_else(|| hp.get("rope_scaling"))
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    if rope.contains_key("full_attention") || rope.contains_key("sliding_attention") {
        return Err(Problem::Unsupported(
            "per-layer-type RoPE parameters are not supported".into(),
        ));
    }
    let rope_type = rope
        .get("rope_type")
        .or_else(|| rope.get("type"))
        .and_then(Json::as_str);
    let rope_factor = rope.get("factor").and_then(Json::as_f64);
    match (rope_type, rope_factor) {
        (None | Some("default"), _) => {}
        (Some("linear"), Some(factor)) => {
            out.push((key("rope.scaling.type"), Value::Str("linear".into())));
            out.push((key("rope.scaling.factor"), Value::F32(factor as f32)));
        }
        (Some("yarn"), Some(factor)) => {
            out.push((key("rope.scaling.type"), Value::Str("yarn".into())));
            out.push((key("rope.scaling.factor"), Value::F32(factor as f32)));
            let original = rope
                .get("original_max_position_embeddings")
                .or_else(|| hp.get("original_max_position_embeddings"))
                .and_then(Json::as_u64)
                .ok_or_else(|| {
                    Problem::Bad("YaRN scaling without `original_max_position_embeddings`".into())
                })?;
            out.push((
                key("rope.scaling.original_context_length"),
                u32_value("original_max_position_embeddings", original)?,
            ));
            for (name, gguf) in [
                ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
            ] {
                if let Some(v) = rope.get(name).and_then(Json::as_f64) {
                    out.push((key(gguf), Value::F32(v as f32)));
                }
            }
        }
        (Some(other), _) => {
            return Err(Problem::Unsupported(format!(
                "the RoPE scaling `{other}` is not supported by this converter"
            )));
        }
    }
    let theta = match rope.get("rope_theta").and_then(Json::as_f64) {
        Some(t) => Some(t),
        None => rate(
            hp,
            &[
                "global_rope_theta",
                "rope_global_theta",
                "rope_theta_global",
                "rope_theta",
                "rotary_emb_base",
            ],
        )?,
    };
    if let Some(theta) = theta {
        out.push((key("rope.freq_base"), Value::F32(theta as f32)));
    }
    if let Some(eps) = rate(hp, &["rms_norm_eps", "norm_eps"])? {
        out.push((
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(eps as f32),
        ));
    }
    if find(
        hp,
        &["num_local_experts", "num_experts", "n_routed_experts"],
    )
    .is_some_and(|v| !v.is_null())
    {
        return Err(Problem::Unsupported(
            "mixture-of-experts checkpoints are not supported".into(),
        ));
    }
    let head_dim = count(hp, &["head_dim"])?;
    if let Some(n) = head_dim {
        out.push((key("attention.key_length"), u32_value("head_dim", n)?));
        out.push((key("attention.value_length"), u32_value("head_dim", n)?));
    }
    let vocab_size = count(hp, &["vocab_size"])?;
    if architecture == Architecture::Llama {
        let n = vocab_size.ok_or_else(|| Problem::Bad("no `vocab_size`".into()))?;
        out.push((key("vocab_size"), u32_value("vocab_size", n)?));
        let embedding = embedding.ok_or_else(|| Problem::Bad("no `hidden_size`".into()))?;
        let rope_dim = head_dim.unwrap_or(embedding / head_count);
        out.push((
            key("rope.dimension_count"),
            u32_value("head_dim", rope_dim)?,
        ));
    }
    let special_ids = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]
        .iter()
        .filter_map(|typ| {
            hp.get(&format!("{typ}_token_id"))
                .and_then(Json::as_u64)
                .map(|id| (typ.to_string(), id))
        })
        .collect();
    Ok(ModelConfig {
        architecture,
        hf_class: hf_class.to_string(),
        block_count,
        head_count,
        head_count_kv,
        vocab_size: vocab_size.and_then(|n| usize::try_from(n).ok()),
        special_ids,
        source_dtype_bytes: find(hp, &["torch_dtype", "dtype"])
            .and_then(Json::as_str)
            .and_then(|dtype| match dtype {
                "float32" => Some(4),
                "bfloat16" | "float16" => Some(2),
                _ => None,
            }),
        hyper_parameters: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> Result<ModelConfig, Problem> {
        let value: Json = serde_json::from_str(json).unwrap();
        parse(value.as_object().unwrap())
    }

    /// Qwen2.5-Coder-0.5B-Instruct's configuration, the fields that matter.
    const QWEN2: &str = r#"{
        "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
        "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
        "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
        "tie_word_embeddings": true, "vocab_size": 151936, "torch_dtype": "bfloat16"
    }"#;

    #[test]
    fn qwen2_hyper_parameters_are_the_keys_llama_cpp_reads() {
        let Ok(c) = config(QWEN2) else {
            panic!("the Qwen2 configuration was refused")
        };
        assert_eq!(c.architecture, Architecture::Qwen2);
        let keys: Vec<&str> = c.hyper_parameters.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "qwen2.block_count",
                "qwen2.context_length",
                "qwen2.embedding_length",
                "qwen2.feed_forward_length",
                "qwen2.attention.head_count",
                "qwen2.attention.head_count_kv",
                "qwen2.rope.freq_base",
                "qwen2.attention.layer_norm_rms_epsilon",
            ]
        );
        assert_eq!(c.hyper_parameters[0].1, Value::U32(24));
        assert_eq!(c.hyper_parameters[6].1, Value::F32(1_000_000.0));
        assert_eq!(c.hyper_parameters[7].1, Value::F32(1e-6));
        assert_eq!(c.vocab_size, Some(151_936));
        assert_eq!(c.source_dtype_bytes, Some(2));
        assert_eq!(
            c.special_ids,
            [("bos".to_string(), 151_643), ("eos".to_string(), 151_645)]
        );
    }

    #[test]
    fn other_architectures_and_scalings_are_refused_with_the_reason() {
        let refused = |json: &str| match config(json) {
            Err(Problem::Unsupported(reason)) => reason,
            Err(Problem::Bad(reason)) => panic!("bad, not unsupported: {reason}"),
            Ok(_) => panic!("accepted: {json}"),
        };
        let reason =
            refused(r#"{"architectures": ["GPTNeoXForCausalLM"], "num_hidden_layers": 2}"#);
        assert!(reason.contains("GPTNeoXForCausalLM"), "{reason}");
        let reason = refused(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 2,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}"#,
        );
        assert!(reason.contains("llama3"), "{reason}");
        assert!(matches!(
            config(r#"{"architectures": [], "num_hidden_layers": 2}"#),
            Err(Problem::Bad(_))
        ));
        assert!(matches!(
            config(r#"{"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": -2}"#),
            Err(Problem::Bad(_))
        ));
    }

    #[test]
    fn llama_adds_its_vocabulary_size_and_rope_dimensions() {
        let Ok(c) = config(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_theta": 10000.0}"#,
        ) else {
            panic!("refused")
        };
        let get = |k: &str| {
            c.hyper_parameters
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("llama.vocab_size"), Some(Value::U32(100)));
        assert_eq!(get("llama.rope.dimension_count"), Some(Value::U32(16)));
        assert_eq!(
            get("llama.rope.scaling.type"),
            Some(Value::Str("linear".into()))
        );
        assert_eq!(get("llama.rope.scaling.factor"), Some(Value::F32(2.0)));
    }
}
