//! The base model, read straight from its GGUF file: the architecture's hyper-parameters and
//! the tensors, quantised ones kept quantised.

use crate::{Result, TrainError};
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The hyper-parameters of a Qwen2 model, from the GGUF's `qwen2.*` keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2Config {
    pub layers: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    pub rms_eps: f64,
    pub context: usize,
}

/// Reads the GGUF file at `path` with Catena's own reader first, which checks every count, size
/// and offset against the file's bytes and the alignment as llama.cpp reads it. candle's reader
/// trusts some of them: it divides by the alignment (zero panicked) and allocates each tensor's
/// stated size when it is read.
pub(crate) fn check_gguf(path: &Path) -> std::result::Result<(), catena_gguf::GgufError> {
    catena_gguf::GgufHeader::read(path)?.check_data_present()
}

/// A base model: its configuration and tensors. Weights of linear layers stay in their GGUF
/// quantisation; norms and biases (F32 in every GGUF llama.cpp writes) are dense.
pub struct BaseModel {
    pub path: PathBuf,
    pub config: Qwen2Config,
    pub name: Option<String>,
    quantised: HashMap<String, Arc<QTensor>>,
    device: Device,
}

impl BaseModel {
    /// Reads the GGUF at `path` onto `device`. Only the `qwen2` architecture is trained for now;
    /// other files are refused with the reason.
    pub fn load(path: &Path, device: &Device) -> Result<BaseModel> {
        let bad = |reason: String| TrainError::BadBase {
            path: path.to_path_buf(),
            reason,
        };
        check_gguf(path).map_err(|e| bad(e.to_string()))?;
        let file = File::open(path).map_err(TrainError::io(path))?;
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader)
            .map_err(|e| bad(format!("not a readable GGUF file ({e})")))?;
        let meta = Metadata {
            map: &content.metadata,
        };
        let arch = meta.string("general.architecture").map_err(bad)?;
        if meta.string("general.type").ok().as_deref() == Some("adapter") {
            return Err(bad(
                "it is a LoRA adapter; train on the model it adapts".into()
            ));
        }
        if arch != "qwen2" {
            return Err(bad(format!(
                "its architecture is `{arch}`; the trainer supports `qwen2` (Qwen2 / Qwen2.5 and the AFM checkpoints built on them)"
            )));
        }
        let heads = meta.uint("qwen2.attention.head_count").map_err(bad)?;
        let hidden = meta.uint("qwen2.embedding_length").map_err(bad)?;
        let embd = content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or_else(|| bad("it has no token_embd.weight".into()))?;
        // GGUF stores dims innermost first; candle's TensorInfo already reverses them to (rows, cols).
        let vocab = match embd.shape.dims() {
            [rows, _] => *rows,
            dims => {
                return Err(bad(format!(
                    "token_embd.weight has shape {dims:?}, not (vocabulary, hidden)"
                )));
            }
        };
        let config = Qwen2Config {
            layers: meta.uint("qwen2.block_count").map_err(bad)?,
            hidden,
            intermediate: meta.uint("qwen2.feed_forward_length").map_err(bad)?,
            heads,
            kv_heads: meta.uint("qwen2.attention.head_count_kv").unwrap_or(heads),
            head_dim: hidden / heads.max(1),
            vocab,
            rope_theta: meta.float("qwen2.rope.freq_base").unwrap_or(1_000_000.0),
            rms_eps: f64::from(
                meta.float("qwen2.attention.layer_norm_rms_epsilon")
                    .unwrap_or(1e-6),
            ),
            context: meta.uint("qwen2.context_length").unwrap_or(32_768),
        };
        if config.heads == 0
            || config.kv_heads == 0
            || !config.heads.is_multiple_of(config.kv_heads)
        {
            return Err(bad(format!(
                "inconsistent attention heads: {} query, {} key/value",
                config.heads, config.kv_heads
            )));
        }
        let mut quantised = HashMap::new();
        for name in content.tensor_infos.keys() {
            let tensor = content
                .tensor(&mut reader, name, device)
                .map_err(|e| bad(format!("tensor {name}: {e}")))?;
            quantised.insert(name.clone(), Arc::new(tensor));
        }
        Ok(BaseModel {
            path: path.to_path_buf(),
            name: meta.string("general.name").ok(),
            config,
            quantised,
            device: device.clone(),
        })
    }

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// A weight as stored (quantised or not).
    pub(crate) fn qtensor(&self, name: &str) -> Result<Arc<QTensor>> {
        self.quantised
            .get(name)
            .cloned()
            .ok_or_else(|| TrainError::BadBase {
                path: self.path.clone(),
                reason: format!("it has no tensor {name}"),
            })
    }

    /// Whether the file has a tensor called `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.quantised.contains_key(name)
    }

    /// A small tensor (a norm, a bias) as dense f32.
    pub(crate) fn dense(&self, name: &str) -> Result<Tensor> {
        let q = self.qtensor(name)?;
        Ok(q.dequantize(&self.device)?)
    }

    /// How the weights of the linear layers are stored, for the logs (`Q4_K`, `Q6_K`, ...).
    pub(crate) fn weight_types(&self) -> Vec<(GgmlDType, usize)> {
        let mut counts: HashMap<GgmlDType, usize> = HashMap::new();
        for q in self.quantised.values() {
            *counts.entry(q.dtype()).or_default() += 1;
        }
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        counts
    }
}

struct Metadata<'a> {
    map: &'a HashMap<String, gguf_file::Value>,
}

impl Metadata<'_> {
    fn get(&self, key: &str) -> Result<&gguf_file::Value, String> {
        self.map
            .get(key)
            .ok_or_else(|| format!("it has no metadata key {key}"))
    }

    fn string(&self, key: &str) -> Result<String, String> {
        self.get(key)?
            .to_string()
            .cloned()
            .map_err(|e| format!("{key}: {e}"))
    }

    fn uint(&self, key: &str) -> Result<usize, String> {
        let value = self.get(key)?;
        value
            .to_u32()
            .map(|v| v as usize)
            .or_else(|_| value.to_u64().map(|v| v as usize))
            .map_err(|e| format!("{key}: {e}"))
    }

    fn float(&self, key: &str) -> Result<f32, String> {
        self.get(key)?.to_f32().map_err(|e| format!("{key}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF file of no tensors and one key, `general.alignment` as a u32.
    fn with_alignment(alignment: u32) -> Vec<u8> {
        let key = b"general.alignment";
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        // No tensors, one key.
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&(key.len() as u64).to_le_bytes());
        bytes.extend_from_slice(key);
        // Type 4: a u32.
        bytes.extend_from_slice(&4u32.to_le_bytes());
        bytes.extend_from_slice(&alignment.to_le_bytes());
        bytes
    }

    /// candle's reader divides by the alignment: a file saying 0 panicked `catena train`.
    #[test]
    fn a_file_with_an_alignment_of_zero_is_refused_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zero.gguf");
        std::fs::write(&path, with_alignment(0)).unwrap();
        let err = BaseModel::load(&path, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("general.alignment is U32(0)"), "{err}");
    }
}
