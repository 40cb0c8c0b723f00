//! `config.json`: which architecture, and the hyper-parameters llama.cpp reads from a GGUF's
//! `{arch}.*` keys. The keys are looked up under the names Hugging Face configurations use (first
//! match wins, as llama.cpp's own converter does), and written with the GGUF types llama.cpp
//! expects (counts as u32, rates as f32).
//!
//! Every number is range-checked here, before anything is allocated from it or written: a
//! checkpoint is untrusted input (a hub, a mirror, a folder someone sent), and a count that is
//! out of range either allocates without bound in this converter (a vocabulary of 2^40 ids),
//! trips an assertion that aborts llama.cpp's quantiser (4e9 layers) or installs a model that
//! no load survives (a context of 2^32 - 1, zero heads).

use crate::error::ConvertError;
use crate::gguf_writer::Value;
use serde_json::{Map, Value as Json};
use std::ops::RangeInclusive;
use std::path::Path;

/// llama.cpp's `LLAMA_MAX_LAYERS` (src/llama-hparams.h): its model loader and its quantiser
/// assert `0 < block_count <= 512`, and a failed assertion aborts the process.
pub const MAX_LAYERS: u64 = 512;
/// llama.cpp hands the training context out as an `int32_t` (`llama_n_ctx_train`), which the
/// Rust binding turns into a `u32` with `expect`: a larger context makes every load panic.
pub const MAX_CONTEXT: u64 = i32::MAX as u64;
/// The largest vocabulary converted. Every id up to it becomes a token string, in memory and in
/// the file, so this is what keeps a hostile `vocab_size` from allocating gigabytes; it is four
/// times the largest vocabulary of a published model (262,144).
pub const MAX_VOCAB: u64 = 1 << 20;
/// The largest width converted (hidden, feed-forward, all query heads together): five times
/// the largest published one (Llama 3.1 405B's feed-forward, 53,248), and small enough that no
/// product of widths and the vocabulary overflows.
pub const MAX_WIDTH: u64 = 1 << 18;

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

/// What `config.json` says, as far as the conversion needs it. Every count is inside the range
/// llama.cpp and this converter accept, and the attention's counts agree with each other.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub architecture: Architecture,
    /// The Hugging Face class name, for messages.
    pub hf_class: String,
    pub block_count: u64,
    /// `hidden_size`: the width of the residual stream.
    pub embedding: u64,
    /// `intermediate_size`: the width of the feed-forward layers.
    pub feed_forward: u64,
    pub head_count: u64,
    /// `num_key_value_heads`, or the head count when the configuration has none.
    pub head_count_kv: u64,
    /// `head_dim`, or `hidden_size / num_attention_heads` when the configuration has none.
    pub head_dim: u64,
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
    config_from_json(&text, &path)
}

/// Parses and checks the bytes of a `config.json`; `path` names it in errors.
pub fn config_from_json(text: &[u8], path: &Path) -> Result<ModelConfig, ConvertError> {
    let json: Json = serde_json::from_slice(text)
        .map_err(|e| ConvertError::bad(path, format!("not valid JSON: {e}")))?;
    let Some(hp) = json.as_object() else {
        return Err(ConvertError::bad(path, "not a JSON object"));
    };
    parse(hp).map_err(|problem| problem.at(path))
}

/// What is wrong with a configuration, before the file's path is known.
#[derive(Debug)]
pub(crate) enum Problem {
    Bad(String),
    Unsupported(String),
    OutOfRange {
        field: String,
        value: String,
        accepted: String,
    },
}

impl Problem {
    pub(crate) fn at(self, path: &Path) -> ConvertError {
        match self {
            Problem::Bad(reason) => ConvertError::bad(path, reason),
            Problem::Unsupported(reason) => ConvertError::Unsupported(reason),
            Problem::OutOfRange {
                field,
                value,
                accepted,
            } => ConvertError::OutOfRange {
                path: path.to_path_buf(),
                field,
                value,
                accepted,
            },
        }
    }

    fn out_of_range(field: &str, value: impl ToString, accepted: impl Into<String>) -> Problem {
        Problem::OutOfRange {
            field: field.to_string(),
            value: value.to_string(),
            accepted: accepted.into(),
        }
    }
}

impl From<String> for Problem {
    fn from(reason: String) -> Problem {
        Problem::Bad(reason)
    }
}

impl From<&str> for Problem {
    fn from(reason: &str) -> Problem {
        Problem::Bad(reason.to_string())
    }
}

/// The first of `keys` present, with the key (even when null, as llama.cpp's converter looks
/// them up).
fn find<'a>(hp: &'a Map<String, Json>, keys: &[&'a str]) -> Option<(&'a str, &'a Json)> {
    keys.iter().find_map(|k| hp.get(*k).map(|v| (*k, v)))
}

/// A whole number from the first of `keys` present, inside `accepted`; `why` says whose limit
/// the range is. Null counts as absent.
fn count(
    hp: &Map<String, Json>,
    keys: &[&str],
    accepted: RangeInclusive<u64>,
    why: &str,
) -> Result<Option<u64>, Problem> {
    match find(hp, keys) {
        None | Some((_, Json::Null)) => Ok(None),
        Some((key, v)) => whole(key, v, accepted, why).map(Some),
    }
}

/// `v` as a whole number inside `accepted`: a negative, fractional or too large number is out
/// of range, anything else is not a number at all.
pub(crate) fn whole(
    key: &str,
    v: &Json,
    accepted: RangeInclusive<u64>,
    why: &str,
) -> Result<u64, Problem> {
    match v.as_u64() {
        Some(n) if accepted.contains(&n) => Ok(n),
        _ if v.is_number() => Err(Problem::out_of_range(
            key,
            v,
            format!(
                "a whole number from {} to {} ({why})",
                accepted.start(),
                accepted.end()
            ),
        )),
        _ => Err(Problem::Bad(format!("`{key}` is not a whole number: {v}"))),
    }
}

/// `v` as the f32 llama.cpp reads, where `accepted` holds for it (`described` in words).
fn real(
    key: &str,
    v: &Json,
    accepted: impl Fn(f32) -> bool,
    described: &str,
) -> Result<f32, Problem> {
    let Some(wide) = v.as_f64() else {
        return Err(Problem::Bad(format!("`{key}` is not a number: {v}")));
    };
    let narrow = wide as f32;
    if narrow.is_finite() && accepted(narrow) {
        Ok(narrow)
    } else {
        Err(Problem::out_of_range(key, v, described))
    }
}

/// A rate from the first of `keys` present (null counts as absent).
fn rate(
    hp: &Map<String, Json>,
    keys: &[&str],
    accepted: impl Fn(f32) -> bool,
    described: &str,
) -> Result<Option<f32>, Problem> {
    match find(hp, keys) {
        None | Some((_, Json::Null)) => Ok(None),
        Some((key, v)) => real(key, v, accepted, described).map(Some),
    }
}

const POSITIVE: &str = "a positive number an f32 holds";

fn positive(x: f32) -> bool {
    x > 0.0
}

fn u32_value(n: u64) -> Value {
    // Every count is range-checked to fit before it gets here.
    Value::U32(u32::try_from(n).unwrap_or(u32::MAX))
}

fn required(n: Option<u64>, what: &str) -> Result<u64, Problem> {
    n.ok_or_else(|| Problem::Bad(format!("no {what}")))
}

/// The `{arch}.*` hyper-parameters in the order they are found, which is the order they are
/// written to the GGUF.
struct Keys {
    arch: &'static str,
    pairs: Vec<(String, Value)>,
}

impl Keys {
    fn push(&mut self, name: &str, value: Value) {
        self.pairs.push((format!("{}.{name}", self.arch), value));
    }
}

/// The widths and head counts every architecture has, once checked against each other.
struct Shape {
    block_count: u64,
    embedding: u64,
    feed_forward: u64,
    head_count: u64,
    head_count_kv: u64,
}

fn parse(hp: &Map<String, Json>) -> Result<ModelConfig, Problem> {
    let (architecture, hf_class) = architecture(hp)?;
    let mut keys = Keys {
        arch: architecture.gguf_name(),
        pairs: Vec::new(),
    };
    let shape = shape(hp, &mut keys)?;
    if hp.get("is_causal") == Some(&Json::Bool(false)) {
        return Err(Problem::Unsupported(
            "a non-causal (embedding) model is not supported".into(),
        ));
    }
    rope(hp, &mut keys)?;
    if let Some(eps) = rate(
        hp,
        &["rms_norm_eps", "norm_eps"],
        |x| x > 0.0 && x < 1.0,
        "a number above 0 and below 1",
    )? {
        keys.push("attention.layer_norm_rms_epsilon", Value::F32(eps));
    }
    if find(
        hp,
        &["num_local_experts", "num_experts", "n_routed_experts"],
    )
    .is_some_and(|(_, v)| !v.is_null())
    {
        return Err(Problem::Unsupported(
            "mixture-of-experts checkpoints are not supported".into(),
        ));
    }
    let head_dim = head_dim(hp, architecture, &shape, &mut keys)?;
    let vocab_size = count(
        hp,
        &["vocab_size"],
        1..=MAX_VOCAB,
        "this converter's largest vocabulary",
    )?;
    if architecture == Architecture::Llama {
        let n = vocab_size.ok_or_else(|| Problem::Bad("no `vocab_size`".into()))?;
        keys.push("vocab_size", u32_value(n));
        keys.push("rope.dimension_count", u32_value(head_dim));
    }
    Ok(ModelConfig {
        architecture,
        hf_class,
        block_count: shape.block_count,
        embedding: shape.embedding,
        feed_forward: shape.feed_forward,
        head_count: shape.head_count,
        head_count_kv: shape.head_count_kv,
        head_dim,
        vocab_size: vocab_size.and_then(|n| usize::try_from(n).ok()),
        special_ids: special_ids(hp),
        source_dtype_bytes: source_dtype_bytes(hp),
        hyper_parameters: keys.pairs,
    })
}

/// The architecture of the first class `architectures` names, and that class's name.
fn architecture(hp: &Map<String, Json>) -> Result<(Architecture, String), Problem> {
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
    Ok((architecture, hf_class.to_string()))
}

/// The layer count, the context, the widths and the head counts, each bounded by the ones
/// before it (no more heads than `hidden_size`, key/value heads dividing the query heads).
fn shape(hp: &Map<String, Json>, keys: &mut Keys) -> Result<Shape, Problem> {
    let block_count = required(
        count(
            hp,
            &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
            1..=MAX_LAYERS,
            "llama.cpp's LLAMA_MAX_LAYERS",
        )?,
        "layer count (`num_hidden_layers`)",
    )?;
    keys.push("block_count", u32_value(block_count));
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
        1..=MAX_CONTEXT,
        "llama.cpp reads the context as a 32-bit signed number",
    )?;
    if let Some(n) = context {
        keys.push("context_length", u32_value(n));
    }
    let embedding = required(
        count(
            hp,
            &["hidden_size", "n_embd", "dim"],
            1..=MAX_WIDTH,
            "this converter's widest layer",
        )?,
        "hidden size (`hidden_size`)",
    )?;
    keys.push("embedding_length", u32_value(embedding));
    let feed_forward = required(
        count(
            hp,
            &[
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ],
            1..=MAX_WIDTH,
            "this converter's widest layer",
        )?,
        "feed-forward size (`intermediate_size`)",
    )?;
    keys.push("feed_forward_length", u32_value(feed_forward));
    let (head_count, head_count_kv) = heads(hp, embedding, keys)?;
    Ok(Shape {
        block_count,
        embedding,
        feed_forward,
        head_count,
        head_count_kv,
    })
}

/// The query head count and the key/value head count (the query count when not given).
fn heads(hp: &Map<String, Json>, embedding: u64, keys: &mut Keys) -> Result<(u64, u64), Problem> {
    let head_count = required(
        count(
            hp,
            &["num_attention_heads", "n_head", "n_heads"],
            1..=embedding,
            "at least one head, and no more heads than `hidden_size`",
        )?,
        "attention head count (`num_attention_heads`)",
    )?;
    keys.push("attention.head_count", u32_value(head_count));
    let given_kv = count(
        hp,
        &["num_key_value_heads", "n_kv_heads"],
        1..=head_count,
        "at least one, and no more than `num_attention_heads`",
    )?;
    if let Some(n) = given_kv {
        if !head_count.is_multiple_of(n) {
            return Err(Problem::out_of_range(
                "num_key_value_heads",
                n,
                format!(
                    "a divisor of `num_attention_heads` ({head_count}): each key/value head serves the same number of query heads"
                ),
            ));
        }
        keys.push("attention.head_count_kv", u32_value(n));
    }
    Ok((head_count, given_kv.unwrap_or(head_count)))
}

/// RoPE: `rope_parameters` (newer configurations) or `rope_scaling`, with the global theta.
fn rope(hp: &Map<String, Json>, keys: &mut Keys) -> Result<(), Problem> {
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
    rope_scaling(hp, &rope, keys)?;
    let theta = match rope.get("rope_theta").filter(|v| !v.is_null()) {
        Some(v) => Some(real("rope_theta", v, positive, POSITIVE)?),
        None => rate(
            hp,
            &[
                "global_rope_theta",
                "rope_global_theta",
                "rope_theta_global",
                "rope_theta",
                "rotary_emb_base",
            ],
            positive,
            POSITIVE,
        )?,
    };
    if let Some(theta) = theta {
        keys.push("rope.freq_base", Value::F32(theta));
    }
    Ok(())
}

/// The RoPE scaling (none, linear or YaRN) and its factor.
fn rope_scaling(
    hp: &Map<String, Json>,
    rope: &Map<String, Json>,
    keys: &mut Keys,
) -> Result<(), Problem> {
    let rope_type = rope
        .get("rope_type")
        .or_else(|| rope.get("type"))
        .and_then(Json::as_str);
    let rope_factor = match rope.get("factor") {
        None | Some(Json::Null) => None,
        Some(v) => Some(real("rope_scaling.factor", v, positive, POSITIVE)?),
    };
    match (rope_type, rope_factor) {
        (None | Some("default"), _) => Ok(()),
        (Some("linear"), Some(factor)) => {
            keys.push("rope.scaling.type", Value::Str("linear".into()));
            keys.push("rope.scaling.factor", Value::F32(factor));
            Ok(())
        }
        (Some("yarn"), Some(factor)) => {
            keys.push("rope.scaling.type", Value::Str("yarn".into()));
            keys.push("rope.scaling.factor", Value::F32(factor));
            yarn(hp, rope, keys)
        }
        (Some(scaling @ ("linear" | "yarn")), None) => Err(Problem::Bad(format!(
            "the RoPE scaling `{scaling}` has no `factor`"
        ))),
        (Some(other), _) => Err(Problem::Unsupported(format!(
            "the RoPE scaling `{other}` is not supported by this converter"
        ))),
    }
}

/// YaRN's original context (required) and its optional tuning factors.
fn yarn(hp: &Map<String, Json>, rope: &Map<String, Json>, keys: &mut Keys) -> Result<(), Problem> {
    let original = rope
        .get("original_max_position_embeddings")
        .or_else(|| hp.get("original_max_position_embeddings"))
        .filter(|v| !v.is_null())
        .ok_or_else(|| {
            Problem::Bad("YaRN scaling without `original_max_position_embeddings`".into())
        })?;
    let original = whole(
        "original_max_position_embeddings",
        original,
        1..=MAX_CONTEXT,
        "llama.cpp reads the context as a 32-bit signed number",
    )?;
    keys.push("rope.scaling.original_context_length", u32_value(original));
    for (name, gguf) in [
        ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
        ("attention_factor", "rope.scaling.yarn_attn_factor"),
        ("beta_fast", "rope.scaling.yarn_beta_fast"),
        ("beta_slow", "rope.scaling.yarn_beta_slow"),
    ] {
        if let Some(v) = rope.get(name).filter(|v| !v.is_null()) {
            let v = real(name, v, |_| true, "a finite number an f32 holds")?;
            keys.push(gguf, Value::F32(v));
        }
    }
    Ok(())
}

/// Each head's width: `head_dim`, or `hidden_size / num_attention_heads`, checked against what
/// the architecture's llama.cpp graph can take.
fn head_dim(
    hp: &Map<String, Json>,
    architecture: Architecture,
    shape: &Shape,
    keys: &mut Keys,
) -> Result<u64, Problem> {
    let (embedding, head_count) = (shape.embedding, shape.head_count);
    let given_head_dim = count(
        hp,
        &["head_dim"],
        1..=MAX_WIDTH / head_count,
        "at least 1, and all query heads together no wider than this converter's widest layer",
    )?;
    if let Some(n) = given_head_dim {
        keys.push("attention.key_length", u32_value(n));
        keys.push("attention.value_length", u32_value(n));
    }
    let head_dim = match given_head_dim {
        Some(n) => n,
        None if embedding.is_multiple_of(head_count) => embedding / head_count,
        None => {
            return Err(Problem::out_of_range(
                "num_attention_heads",
                head_count,
                format!(
                    "a divisor of `hidden_size` ({embedding}) when `head_dim` is not given: \
                     llama.cpp takes each head's width as hidden_size / num_attention_heads"
                ),
            ));
        }
    };
    // llama.cpp's qwen2 graph gives the query and output projections `hidden_size` rows.
    if architecture == Architecture::Qwen2 && head_count * head_dim != embedding {
        return Err(Problem::out_of_range(
            "head_dim",
            head_dim,
            format!(
                "`hidden_size` / `num_attention_heads` ({embedding} / {head_count}): \
                 llama.cpp's qwen2 has no other head width"
            ),
        ));
    }
    // Llama's query and key rows are regrouped into rotary pairs per head.
    if architecture == Architecture::Llama && !head_dim.is_multiple_of(2) {
        return Err(Problem::out_of_range(
            "head_dim",
            head_dim,
            "an even number: RoPE rotates pairs of dimensions",
        ));
    }
    Ok(head_dim)
}

/// The special token ids the configuration gives (`bos_token_id`, ...), by their type.
fn special_ids(hp: &Map<String, Json>) -> Vec<(String, u64)> {
    ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]
        .iter()
        .filter_map(|typ| {
            hp.get(&format!("{typ}_token_id"))
                .and_then(Json::as_u64)
                .map(|id| (typ.to_string(), id))
        })
        .collect()
}

/// Bytes per weight in the checkpoint, from `torch_dtype`, when it names a type converted.
fn source_dtype_bytes(hp: &Map<String, Json>) -> Option<u64> {
    find(hp, &["torch_dtype", "dtype"])
        .and_then(|(_, v)| v.as_str())
        .and_then(|dtype| match dtype {
            "float32" => Some(4),
            "bfloat16" | "float16" => Some(2),
            _ => None,
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
        assert_eq!(
            (c.embedding, c.feed_forward, c.head_count_kv, c.head_dim),
            (896, 4864, 2, 64)
        );
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
            Err(other) => panic!("not refused as unsupported: {other:?}"),
            Ok(_) => panic!("accepted: {json}"),
        };
        let reason =
            refused(r#"{"architectures": ["GPTNeoXForCausalLM"], "num_hidden_layers": 2}"#);
        assert!(reason.contains("GPTNeoXForCausalLM"), "{reason}");
        let reason = refused(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 2,
                "hidden_size": 64, "intermediate_size": 128,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}"#,
        );
        assert!(reason.contains("llama3"), "{reason}");
        assert!(matches!(
            config(r#"{"architectures": [], "num_hidden_layers": 2}"#),
            Err(Problem::Bad(_))
        ));
        assert!(matches!(
            config(r#"{"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": -2}"#),
            Err(Problem::OutOfRange { .. })
        ));
    }

    #[test]
    fn llama_adds_its_vocabulary_size_and_rope_dimensions() {
        let Ok(c) = config(
            r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
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

    /// Published configurations of each architecture (the fields that matter) are inside every
    /// range: the AFM 7B models' base, the next Qwen generation, a Llama-layout model.
    #[test]
    fn published_configurations_are_accepted() {
        for json in [
            // Qwen2.5-7B-Instruct.
            r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
                "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
                "num_hidden_layers": 28, "max_position_embeddings": 32768, "vocab_size": 152064,
                "rope_theta": 1000000.0, "rms_norm_eps": 1e-06}"#,
            // Qwen3-0.6B: 16 heads of 128, wider than hidden_size together.
            r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
                "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8,
                "head_dim": 128, "num_hidden_layers": 28, "max_position_embeddings": 40960,
                "vocab_size": 151936, "rope_theta": 1000000, "rms_norm_eps": 1e-06}"#,
            // TinyLlama-1.1B.
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                "intermediate_size": 5632, "num_attention_heads": 32, "num_key_value_heads": 4,
                "num_hidden_layers": 22, "max_position_embeddings": 2048, "vocab_size": 32000,
                "rope_theta": 10000.0, "rms_norm_eps": 1e-05}"#,
        ] {
            if let Err(problem) = config(json) {
                panic!("{problem:?}: {json}");
            }
        }
    }

    /// `QWEN2` with `field` set to `value` (raw JSON).
    fn qwen2_with(field: &str, value: &str) -> Result<ModelConfig, Problem> {
        let mut json: Json = serde_json::from_str(QWEN2).unwrap();
        json[field] = serde_json::from_str(value).unwrap();
        parse(json.as_object().unwrap())
    }

    /// Each number the issue's hostile checkpoints carried, and the others llama.cpp or this
    /// converter cannot take, is refused with the field's name, its value and the range.
    #[test]
    fn every_number_out_of_range_is_refused_with_its_name_value_and_range() {
        for (field, value, accepted) in [
            ("vocab_size", "1099511627776", "1 to 1048576"),
            ("vocab_size", "4611686018427387904", "1 to 1048576"),
            ("vocab_size", "0", "1 to 1048576"),
            ("hidden_size", "0", "1 to 262144"),
            ("hidden_size", "18446744073709551615", "1 to 262144"),
            ("num_key_value_heads", "0", "1 to 14"),
            ("num_key_value_heads", "28", "1 to 14"),
            (
                "num_key_value_heads",
                "4",
                "a divisor of `num_attention_heads`",
            ),
            ("num_attention_heads", "0", "1 to 896"),
            ("num_attention_heads", "897", "1 to 896"),
            ("num_attention_heads", "6", "a divisor of `hidden_size`"),
            ("max_position_embeddings", "4294967295", "1 to 2147483647"),
            ("max_position_embeddings", "0", "1 to 2147483647"),
            ("num_hidden_layers", "4000000000", "1 to 512"),
            ("num_hidden_layers", "513", "1 to 512"),
            ("num_hidden_layers", "0", "1 to 512"),
            ("num_hidden_layers", "-1", "1 to 512"),
            ("num_hidden_layers", "2.5", "1 to 512"),
            ("intermediate_size", "0", "1 to 262144"),
            ("intermediate_size", "1000000000", "1 to 262144"),
            ("head_dim", "0", "1 to 18724"),
            ("head_dim", "100000", "1 to 18724"),
            ("head_dim", "128", "hidden_size` / `num_attention_heads`"),
            ("rope_theta", "0", POSITIVE),
            ("rope_theta", "-10000.0", POSITIVE),
            ("rope_theta", "1e+39", POSITIVE),
            ("rms_norm_eps", "0", "above 0 and below 1"),
            ("rms_norm_eps", "2", "above 0 and below 1"),
        ] {
            match qwen2_with(field, value) {
                Err(Problem::OutOfRange {
                    field: named,
                    value: shown,
                    accepted: range,
                }) => {
                    assert_eq!((named.as_str(), shown.as_str()), (field, value));
                    assert!(range.contains(accepted), "{field} = {value}: {range}");
                }
                Err(other) => panic!("{field} = {value}: {other:?}"),
                Ok(_) => panic!("{field} = {value} was accepted"),
            }
        }
        // The bounds themselves are accepted.
        for (field, value) in [
            ("num_hidden_layers", "512"),
            ("max_position_embeddings", "2147483647"),
            ("vocab_size", "1048576"),
            ("num_key_value_heads", "14"),
            ("num_key_value_heads", "7"),
        ] {
            assert!(qwen2_with(field, value).is_ok(), "{field} = {value}");
        }
    }

    #[test]
    fn rope_scaling_numbers_are_range_checked() {
        let scaled = |rope: &str| qwen2_with("rope_scaling", rope);
        assert!(
            scaled(r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#)
                .is_ok()
        );
        for (rope, field) in [
            (r#"{"type": "linear", "factor": 0}"#, "rope_scaling.factor"),
            (
                r#"{"type": "linear", "factor": 1e300}"#,
                "rope_scaling.factor",
            ),
            (
                r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4294967295}"#,
                "original_max_position_embeddings",
            ),
            (
                r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 1e40}"#,
                "beta_fast",
            ),
        ] {
            match scaled(rope) {
                Err(Problem::OutOfRange { field: named, .. }) => assert_eq!(named, field, "{rope}"),
                other => panic!("{rope}: {other:?}"),
            }
        }
    }

    /// Whatever whole number a count field holds, the configuration is accepted with that
    /// number inside its range or refused as out of range, naming the field or the one it
    /// contradicts: never a panic, never a silent truncation. The values are each range's
    /// edges and the widths of the integer types a count passes through.
    #[test]
    fn any_count_is_accepted_in_range_or_refused_by_name() {
        let values = [
            0u64,
            1,
            2,
            3,
            7,
            14,
            64,
            511,
            512,
            513,
            896,
            4096,
            1 << 20,
            (1 << 20) + 1,
            1 << 31,
            (1 << 31) - 1,
            u32::MAX as u64,
            1 << 32,
            1 << 40,
            1 << 62,
            u64::MAX,
        ];
        for field in [
            "vocab_size",
            "hidden_size",
            "num_key_value_heads",
            "num_attention_heads",
            "max_position_embeddings",
            "num_hidden_layers",
            "intermediate_size",
            "head_dim",
        ] {
            for value in values {
                match qwen2_with(field, &value.to_string()) {
                    Ok(c) => {
                        let kept = match field {
                            "vocab_size" => c.vocab_size.map(|n| n as u64),
                            "hidden_size" => Some(c.embedding),
                            "num_key_value_heads" => Some(c.head_count_kv),
                            "num_attention_heads" => Some(c.head_count),
                            "num_hidden_layers" => Some(c.block_count),
                            "intermediate_size" => Some(c.feed_forward),
                            "head_dim" => Some(c.head_dim),
                            _ => Some(value),
                        };
                        assert_eq!(kept, Some(value), "{field}");
                        assert!((1..=MAX_CONTEXT).contains(&value), "{field} = {value}");
                    }
                    Err(Problem::OutOfRange { field: named, .. }) => assert!(
                        named == field
                            || matches!(
                                named.as_str(),
                                "head_dim" | "num_attention_heads" | "num_key_value_heads"
                            ),
                        "{named} named for {field} = {value}"
                    ),
                    Err(other) => panic!("{field} = {value}: {other:?}"),
                }
            }
        }
    }
}
