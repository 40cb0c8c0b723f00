//! Hugging Face checkpoints to GGUF, in Rust: the folder a model hub publishes (`config.json`,
//! `tokenizer.json`, `tokenizer_config.json`, `model*.safetensors`) becomes a GGUF F16 file that
//! llama.cpp loads, one tensor at a time, so a 7B model converts in a few megabytes of memory.
//! Quantising that file is llama.cpp's own job (`catena_engine_api::quantize`).
//!
//! What llama.cpp expects is what its own converter (`convert_hf_to_gguf.py`) writes: the same
//! tensor names and layouts, 2-D weights as F16 and norms, biases and other 1-D tensors as F32,
//! the same `{arch}.*` and `tokenizer.*` keys. [`open`] reads and checks everything except the
//! weight bytes, so an unsupported or broken checkpoint is refused before anything is written.

mod config;
mod error;
mod gguf_writer;
mod names;
pub mod random_weights;
mod vocab;
mod weights;

pub use config::{
    Architecture, MAX_CONTEXT, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, ModelConfig, config_from_json,
    read_config,
};
pub use error::ConvertError;

use gguf_writer::{Counting, GgmlType, TensorPlan, Value};
use half::f16;
use names::Mapped;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use weights::{Weight, WeightType, Weights};

/// llama.cpp's file type for "mostly F16".
const FILE_TYPE_F16: u32 = 1;
/// ggml's quantisation format version, written by every GGUF converter.
const QUANTIZATION_VERSION: u32 = 2;
/// Elements converted per read: large enough for fast I/O, small enough to stay out of the way.
const CHUNK_ELEMENTS: u64 = 1 << 20;

/// A checkpoint, read and checked, ready to be written.
pub struct Checkpoint {
    dir: PathBuf,
    architecture: Architecture,
    weights: Weights,
    plan: Vec<Planned>,
    metadata_rest: Vec<(String, Value)>,
}

struct Planned {
    source: Weight,
    target: TensorPlan,
    /// Llama's query and key rows are regrouped per head.
    rope_heads: Option<u64>,
}

/// Progress of [`Checkpoint::write_f16`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub tensor: String,
    pub written_bytes: u64,
    pub total_bytes: u64,
}

/// A GGUF file written by [`Checkpoint::write_f16`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub bytes: u64,
    pub tensors: usize,
}

/// What `config.json` and `tokenizer.json` say, read and checked.
#[derive(Debug, Clone)]
pub struct Metadata {
    pub config: ModelConfig,
    /// The vocabulary's size: the rows of the embedding and output tensors.
    pub tokens: u64,
}

/// Reads and checks the bytes of `config.json` and `tokenizer.json` as [`open`] does before it
/// looks at a weight (no `tokenizer_config.json`, no chat template file). Untrusted bytes in,
/// an error or the checked metadata out, in memory bounded by the input and the range checks:
/// the converter's fuzz target drives this.
pub fn check_metadata(config: &[u8], tokenizer: &[u8]) -> Result<Metadata, ConvertError> {
    let config = config_from_json(config, Path::new("config.json"))?;
    let vocabulary =
        vocab::vocab_from_json(tokenizer, None, None, &config, Path::new("tokenizer.json"))?;
    Ok(Metadata {
        config,
        tokens: vocabulary.tokens,
    })
}

/// Reads and checks the checkpoint in `dir`: the configuration, the tokenizer and every weight
/// header, each tensor's shape against what llama.cpp's loader expects of a model of that
/// configuration, and every layer complete. Nothing is written.
pub fn open(dir: &Path) -> Result<Checkpoint, ConvertError> {
    let config = read_config(dir)?;
    let vocabulary = vocab::read_vocab(dir, &config)?;
    let weights = Weights::open(dir)?;
    let mut plan = Vec::with_capacity(weights.tensors.len());
    for source in &weights.tensors {
        if let Some(planned) = plan_tensor(dir, &config, vocabulary.tokens, source)? {
            plan.push(planned);
        }
    }
    check_complete(dir, &config, &plan)?;
    let mut metadata_rest = config.hyper_parameters.clone();
    metadata_rest.push(("general.file_type".into(), Value::U32(FILE_TYPE_F16)));
    metadata_rest.extend(vocabulary.metadata);
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        architecture: config.architecture,
        weights,
        plan,
        metadata_rest,
    })
}

/// The GGUF tensor that `source` becomes, its shape checked against what llama.cpp expects of
/// a model of `config` with `tokens` tokens; `None` for a tensor llama.cpp does not read.
fn plan_tensor(
    dir: &Path,
    config: &ModelConfig,
    tokens: u64,
    source: &Weight,
) -> Result<Option<Planned>, ConvertError> {
    let not_part = || {
        ConvertError::Unsupported(format!(
            "the tensor `{}` is not part of a {} model as llama.cpp runs it",
            source.name, config.hf_class
        ))
    };
    let name = match names::gguf_name(config.architecture, &source.name) {
        Some(Mapped::Tensor(name)) => name,
        Some(Mapped::Skip) => return Ok(None),
        None => return Err(not_part()),
    };
    if let Some(block) = block_of(&name)
        && block >= config.block_count
    {
        return Err(ConvertError::bad(
            dir,
            format!(
                "`{}` belongs to layer {block}, but config.json says {} layers",
                source.name, config.block_count
            ),
        ));
    }
    let Some(expected) = names::expected_shape(config, &name, tokens) else {
        return Err(not_part());
    };
    if source.shape != expected {
        return Err(ConvertError::bad(
            dir,
            format!(
                "`{}` has the shape {:?}, but config.json and the vocabulary of {} tokens \
                 make it {expected:?}",
                source.name, source.shape, tokens
            ),
        ));
    }
    let ggml_type = if source.shape.len() <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
    {
        GgmlType::F32
    } else {
        GgmlType::F16
    };
    let rope_heads = names::rope_heads(
        config.architecture,
        &source.name,
        config.head_count,
        Some(config.head_count_kv),
    );
    Ok(Some(Planned {
        target: TensorPlan {
            name,
            dims: source.shape.iter().rev().copied().collect(),
            ggml_type,
        },
        source: source.clone(),
        rope_heads,
    }))
}

/// Checks that the plan has the embedding, the output norm and every tensor of every layer:
/// llama.cpp refuses a model with a layer missing any of its tensors.
fn check_complete(dir: &Path, config: &ModelConfig, plan: &[Planned]) -> Result<(), ConvertError> {
    let present: HashSet<&str> = plan.iter().map(|p| p.target.name.as_str()).collect();
    for required in ["token_embd.weight", "output_norm.weight"] {
        if !present.contains(required) {
            return Err(ConvertError::bad(
                dir,
                format!("the weights have no tensor for llama.cpp's `{required}`"),
            ));
        }
    }
    let required = names::required_in_block(config.architecture);
    for block in 0..config.block_count {
        for part in &required {
            let name = format!("blk.{block}.{part}");
            if !present.contains(name.as_str()) {
                return Err(ConvertError::bad(
                    dir,
                    format!(
                        "layer {block} of {} has no tensor for llama.cpp's `{name}`",
                        config.block_count
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn block_of(gguf_name: &str) -> Option<u64> {
    gguf_name
        .strip_prefix("blk.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl Checkpoint {
    pub fn architecture(&self) -> Architecture {
        self.architecture
    }

    /// Bytes of the checkpoint's weight files.
    pub fn source_bytes(&self) -> u64 {
        self.weights.total_bytes()
    }

    /// Bytes of the tensor data the F16 file will hold (the header adds a few megabytes).
    pub fn f16_data_bytes(&self) -> u64 {
        self.plan
            .iter()
            .map(|p| gguf_writer::aligned(p.target.bytes()))
            .sum()
    }

    /// Writes the GGUF F16 file to `out` (created or truncated; the caller names it and moves it
    /// into place), with `name` as `general.name`. `progress` hears after every tensor.
    pub fn write_f16(
        &mut self,
        out: &Path,
        name: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Written, ConvertError> {
        let mut metadata: Vec<(String, Value)> = vec![
            (
                "general.architecture".into(),
                Value::Str(self.architecture.gguf_name().into()),
            ),
            ("general.type".into(), Value::Str("model".into())),
            ("general.name".into(), Value::Str(name.into())),
            (
                "general.quantization_version".into(),
                Value::U32(QUANTIZATION_VERSION),
            ),
        ];
        metadata.extend(self.metadata_rest.iter().cloned());
        let tensors: Vec<TensorPlan> = self.plan.iter().map(|p| p.target.clone()).collect();
        let file = File::create(out).map_err(ConvertError::io(out))?;
        let mut w = Counting {
            inner: BufWriter::with_capacity(4 << 20, file),
            count: 0,
        };
        let header = gguf_writer::write_header(&mut w, &metadata, &tensors)
            .map_err(ConvertError::io(out))?;
        let total = gguf_writer::file_size(header, &tensors);
        for planned in &self.plan {
            let written = write_tensor(&mut self.weights, &self.dir, planned, &mut w, out)?;
            gguf_writer::write_padding(&mut w, written).map_err(ConvertError::io(out))?;
            progress(Progress {
                tensor: planned.target.name.clone(),
                written_bytes: w.count,
                total_bytes: total,
            });
        }
        let Counting { inner, count } = w;
        let file = inner
            .into_inner()
            .map_err(|e| ConvertError::io(out)(e.into_error()))?;
        file.sync_all().map_err(ConvertError::io(out))?;
        Ok(Written {
            bytes: count,
            tensors: tensors.len(),
        })
    }
}

/// Converts one tensor into `w`; returns the bytes written (before padding).
fn write_tensor(
    weights: &mut Weights,
    dir: &Path,
    planned: &Planned,
    w: &mut impl Write,
    out: &Path,
) -> Result<u64, ConvertError> {
    let source = &planned.source;
    let from = source.weight_type;
    let to = planned.target.ggml_type;
    let elements = source.elements();
    if let Some(heads) = planned.rope_heads {
        // Query and key projections are small enough to regroup whole.
        let mut raw = vec![0u8; (elements * from.size()) as usize];
        weights.read(source, 0, &mut raw)?;
        let converted = convert(&raw, from, to);
        let rows = source.shape.first().copied().unwrap_or(1);
        let row_bytes = (converted.len() as u64 / rows.max(1)) as usize;
        let Some(regrouped) = names::unpermute_rows(&converted, rows, row_bytes, heads) else {
            return Err(ConvertError::bad(
                dir,
                format!(
                    "`{}` has {rows} rows, which do not split into {heads} heads of rotary pairs",
                    source.name
                ),
            ));
        };
        w.write_all(&regrouped).map_err(ConvertError::io(out))?;
        return Ok(regrouped.len() as u64);
    }
    let mut done = 0u64;
    let mut raw = Vec::new();
    while done < elements {
        let n = CHUNK_ELEMENTS.min(elements - done);
        raw.resize((n * from.size()) as usize, 0);
        weights.read(source, done * from.size(), &mut raw)?;
        w.write_all(&convert(&raw, from, to))
            .map_err(ConvertError::io(out))?;
        done += n;
    }
    Ok(elements * to.element_size())
}

/// Little-endian elements of `from` as little-endian elements of `to`. F32 to F16 rounds to
/// nearest, ties to even (as numpy does for llama.cpp's converter); BF16 widens exactly first.
fn convert(raw: &[u8], from: WeightType, to: GgmlType) -> Vec<u8> {
    let as_f32 = |chunk: &[u8]| -> f32 {
        match from {
            WeightType::F32 => f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
            WeightType::F16 => f16::from_le_bytes([chunk[0], chunk[1]]).to_f32(),
            WeightType::BF16 => {
                f32::from_bits(u32::from(u16::from_le_bytes([chunk[0], chunk[1]])) << 16)
            }
        }
    };
    match (from, to) {
        (WeightType::F16, GgmlType::F16) | (WeightType::F32, GgmlType::F32) => raw.to_vec(),
        (_, GgmlType::F16) => raw
            .chunks_exact(from.size() as usize)
            .flat_map(|c| f16::from_f32(as_f32(c)).to_le_bytes())
            .collect(),
        (_, GgmlType::F32) => raw
            .chunks_exact(from.size() as usize)
            .flat_map(|c| as_f32(c).to_le_bytes())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena_gguf::GgufHeader;
    use weights::tests::write_safetensors;

    #[test]
    fn conversions_round_as_numpy_does() {
        let bf16 = |v: f32| ((v.to_bits() >> 16) as u16).to_le_bytes();
        // 1.0, -2.5 and 1/3 (not exact in BF16 or F16).
        let third = f32::from_bits(0x3EAA_AAAB);
        let raw: Vec<u8> = [1.0f32, -2.5, third]
            .iter()
            .flat_map(|v| bf16(*v))
            .collect();
        let out = convert(&raw, WeightType::BF16, GgmlType::F16);
        let halves: Vec<f16> = out
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(halves[0], f16::from_f32(1.0));
        assert_eq!(halves[1], f16::from_f32(-2.5));
        // BF16(1/3) = 0x3EAA -> 0.33203125 exactly, then to F16 nearest: 0x3550.
        assert_eq!(halves[2].to_bits(), 0x3550);
        // Ties go to even: 1 + 2^-11 lies halfway between two F16 values.
        let tie = 1.0f32 + f32::powi(2.0, -11);
        let out = convert(&tie.to_le_bytes(), WeightType::F32, GgmlType::F16);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0x3C00);
        // Widening is exact.
        let out = convert(&bf16(-2.5), WeightType::BF16, GgmlType::F32);
        assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), -2.5);
    }

    /// A toy Qwen2 of `layers` layers in the Hugging Face layout (config.json says one).
    fn toy_checkpoint(dir: &Path, layers: usize) {
        toy_checkpoint_with(dir, layers, Vec::new());
    }

    /// [`toy_checkpoint`] with `extra` tensors after its own.
    fn toy_checkpoint_with(
        dir: &Path,
        layers: usize,
        extra: Vec<(&'static str, &'static str, Vec<u64>, Vec<u8>)>,
    ) {
        let config = serde_json::json!({
            "architectures": ["Qwen2ForCausalLM"], "hidden_size": 4, "intermediate_size": 8,
            "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "vocab_size": 6, "tie_word_embeddings": true, "eos_token_id": 5
        });
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let tokenizer = serde_json::json!({
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3}, "merges": ["a b"]},
            "added_tokens": [{"id": 5, "content": "<|im_end|>", "special": true}],
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": vocab::tests_regex()}},
            "post_processor": {"type": "ByteLevel"}
        });
        std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
        let bf16 = |n: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|i| (((i as f32) * 0.25).to_bits() >> 16).to_le_bytes()[..2].to_vec())
                .collect()
        };
        let mut tensors = vec![
            ("model.embed_tokens.weight", "BF16", vec![6u64, 4], bf16(24)),
            ("model.norm.weight", "BF16", vec![4], bf16(4)),
        ];
        for (layer, (n, shape)) in (0..layers).flat_map(|layer| {
            [
                ("input_layernorm.weight", vec![4u64]),
                ("post_attention_layernorm.weight", vec![4]),
                ("self_attn.q_proj.weight", vec![4, 4]),
                ("self_attn.q_proj.bias", vec![4]),
                ("self_attn.k_proj.weight", vec![2, 4]),
                ("self_attn.k_proj.bias", vec![2]),
                ("self_attn.v_proj.weight", vec![2, 4]),
                ("self_attn.v_proj.bias", vec![2]),
                ("self_attn.o_proj.weight", vec![4, 4]),
                ("mlp.gate_proj.weight", vec![8, 4]),
                ("mlp.up_proj.weight", vec![8, 4]),
                ("mlp.down_proj.weight", vec![4, 8]),
            ]
            .map(|tensor| (layer, tensor))
        }) {
            let elements = shape.iter().product::<u64>() as usize;
            let name: &'static str =
                Box::leak(format!("model.layers.{layer}.{n}").into_boxed_str());
            tensors.push((name, "BF16", shape, bf16(elements)));
        }
        tensors.extend(extra);
        write_safetensors(&dir.join("model.safetensors"), &tensors);
    }

    #[test]
    fn a_toy_qwen2_becomes_a_gguf_with_llama_cpps_names_and_types() {
        let dir = tempfile::tempdir().unwrap();
        toy_checkpoint(dir.path(), 1);
        let mut checkpoint = open(dir.path()).unwrap();
        assert_eq!(checkpoint.architecture(), Architecture::Qwen2);
        let out = dir.path().join("toy.gguf");
        let mut seen = Vec::new();
        let written = checkpoint
            .write_f16(&out, "toy", &mut |p| seen.push(p.tensor))
            .unwrap();
        assert_eq!(written.tensors, 14);
        assert_eq!(seen.len(), 14);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), written.bytes);
        let header = GgufHeader::read(&out).unwrap();
        header.check_data_present().unwrap();
        assert_eq!(header.architecture(), Some("qwen2"));
        assert_eq!(header.get_u64("qwen2.attention.head_count_kv"), Some(1));
        assert_eq!(header.get_u64("tokenizer.ggml.eos_token_id"), Some(5));
        let tensor = |name: &str| {
            header
                .tensors
                .iter()
                .find(|t| t.name == name)
                .cloned()
                .unwrap_or_else(|| panic!("no {name}"))
        };
        assert_eq!(tensor("token_embd.weight").dims, vec![4, 6]);
        assert_eq!(tensor("token_embd.weight").ggml_type, 1);
        assert_eq!(tensor("blk.0.attn_q.bias").ggml_type, 0);
        assert_eq!(tensor("blk.0.attn_norm.weight").ggml_type, 0);
        assert_eq!(tensor("blk.0.ffn_down.weight").dims, vec![8, 4]);
        // The weights themselves: embedding element 5 was 1.25.
        let bytes = std::fs::read(&out).unwrap();
        let at = (header.data_offset + tensor("token_embd.weight").offset) as usize + 5 * 2;
        assert_eq!(
            f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32(),
            1.25
        );
        assert_eq!(
            checkpoint.f16_data_bytes() + header.data_offset,
            written.bytes
        );
    }

    /// The toy's config.json with `change` applied.
    fn edit_config(dir: &Path, change: impl FnOnce(&mut serde_json::Value)) {
        let path = dir.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        change(&mut config);
        std::fs::write(&path, config.to_string()).unwrap();
    }

    #[test]
    fn a_layer_beyond_the_configuration_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        toy_checkpoint(dir.path(), 2);
        let err = open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("belongs to layer 1"), "{err}");
    }

    #[test]
    fn a_missing_layer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        toy_checkpoint(dir.path(), 1);
        edit_config(dir.path(), |c| c["num_hidden_layers"] = 2.into());
        let err = open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("layer 1 of 2 has no tensor"), "{err}");
    }

    /// Numbers inside the accepted ranges that still disagree with the weights: llama.cpp would
    /// refuse the file at every load, so the converter refuses the checkpoint.
    #[test]
    fn tensors_whose_shape_the_configuration_contradicts_are_refused() {
        for (field, value, tensor) in [
            ("vocab_size", 7, "model.embed_tokens.weight"),
            ("hidden_size", 8, "model.embed_tokens.weight"),
            ("intermediate_size", 16, "mlp.gate_proj.weight"),
            ("num_key_value_heads", 2, "self_attn.k_proj.weight"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            toy_checkpoint(dir.path(), 1);
            edit_config(dir.path(), |c| c[field] = value.into());
            let err = open(dir.path()).err().unwrap().to_string();
            assert!(
                err.contains(tensor) && err.contains("has the shape"),
                "{field} = {value}: {err}"
            );
        }
    }

    #[test]
    fn a_layer_number_spelled_otherwise_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Layer "00" was layer 0 again: both were written, and the file held llama.cpp's
        // `blk.0.attn_norm.weight` twice.
        let again = (
            "model.layers.00.input_layernorm.weight",
            "F32",
            vec![4],
            vec![0; 16],
        );
        toy_checkpoint_with(dir.path(), 1, vec![again]);
        let err = open(dir.path()).err().unwrap();
        assert!(matches!(err, ConvertError::Unsupported(_)), "{err}");
        assert!(
            err.to_string()
                .contains("`model.layers.00.input_layernorm.weight` is not part of"),
            "{err}"
        );
    }

    #[test]
    fn a_tensor_llama_cpp_does_not_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        toy_checkpoint(dir.path(), 1);
        let path = dir.path().join("model.safetensors");
        // Qwen2's output projection has no bias in llama.cpp.
        let tensors = [
            (
                "model.layers.0.self_attn.o_proj.bias",
                "F32",
                vec![4u64],
                vec![0u8; 16],
            ),
            ("model.embed_tokens.weight", "F32", vec![6, 4], vec![0; 96]),
            ("model.norm.weight", "F32", vec![4], vec![0; 16]),
        ];
        write_safetensors(&path, &tensors);
        let err = open(dir.path()).err().unwrap();
        assert!(matches!(err, ConvertError::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("o_proj.bias"), "{err}");
    }

    #[test]
    fn metadata_from_bytes_is_checked_as_open_checks_it() {
        let dir = tempfile::tempdir().unwrap();
        toy_checkpoint(dir.path(), 1);
        let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
        let metadata = check_metadata(&read("config.json"), &read("tokenizer.json")).unwrap();
        assert_eq!(metadata.tokens, 6);
        assert_eq!(metadata.config.head_dim, 2);
        let huge = br#"{"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 1,
            "hidden_size": 4, "intermediate_size": 8, "num_attention_heads": 2,
            "vocab_size": 1099511627776}"#;
        let err = check_metadata(huge, &read("tokenizer.json")).err().unwrap();
        assert!(
            matches!(&err, ConvertError::OutOfRange { field, .. } if field == "vocab_size"),
            "{err}"
        );
        assert!(check_metadata(b"{", b"").is_err());
    }
}
