//! Reading a LoRA adapter in llama.cpp's GGUF form back into the trainer: the file
//! [`export::write_gguf`] writes, which is also the form Catena ships its default model's adapter
//! in. This is how training goes on from an adapter that exists only as a GGUF (RL from the
//! shipped adapter).
//!
//! Every shape in the header is checked against the base model before any tensor data is read,
//! so a hostile file cannot make the reader allocate more than the factors of a real adapter
//! for that model.

use crate::base::BaseModel;
use crate::export::{self, MAX_LORA_RANK};
use crate::lora::{LoraConfig, Target, tensor_name};
use crate::{Result, TrainError};
use candle_core::quantized::{GgmlDType, gguf_file};
use candle_core::{Device, Tensor};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// The adapter's shape and its factors under the trainer's names, checked against `base`:
/// what [`crate::lora::LoraParams::load`] takes.
pub(crate) fn read_gguf_adapter_for(
    base: &BaseModel,
    path: &Path,
    device: &Device,
) -> Result<(LoraConfig, HashMap<String, Tensor>)> {
    let bad = |reason: String| TrainError::BadCheckpoint {
        path: path.to_path_buf(),
        reason,
    };
    crate::base::check_gguf(path).map_err(|e| bad(e.to_string()))?;
    let file = File::open(path).map_err(TrainError::io(path))?;
    let file_len = file.metadata().map_err(TrainError::io(path))?.len();
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader)
        .map_err(|e| bad(format!("not a readable GGUF file ({e})")))?;
    let alpha = adapter_alpha(&content).map_err(bad)?;
    let factors = factor_shapes(base, &content, file_len).map_err(bad)?;
    let rank = factors.rank;
    let mut tensors = HashMap::new();
    for (gguf_name, trainer_name) in &factors.names {
        let info = &content.tensor_infos[gguf_name];
        let tensor = info
            .read(&mut reader, content.tensor_data_offset, device)
            .and_then(|q| q.dequantize(device))
            .map_err(|e| bad(format!("{gguf_name}: {e}")))?;
        tensors.insert(trainer_name.clone(), tensor);
    }
    let config = LoraConfig {
        rank,
        // llama.cpp scales by `alpha / r`: the same scale as a plain (not rank-stabilised) LoRA
        // with this alpha.
        alpha,
        dropout: 0.0,
        rslora: false,
        targets: factors.targets.into_iter().collect(),
    };
    export::check_factors(base, &config, &tensors)
        .map_err(|reason| bad(format!("{reason} (is it an adapter for this base model?)")))?;
    Ok((config, tensors))
}

/// `adapter.lora.alpha` of a file that says it is a LoRA adapter.
fn adapter_alpha(content: &gguf_file::Content) -> std::result::Result<f32, String> {
    let text = |key: &str| match content.metadata.get(key) {
        Some(gguf_file::Value::String(s)) => Some(s.as_str()),
        _ => None,
    };
    if text("general.type") != Some("adapter") || text("adapter.type") != Some("lora") {
        return Err(
            "not a LoRA adapter (its general.type must be `adapter` and adapter.type `lora`)"
                .into(),
        );
    }
    let alpha = match content.metadata.get("adapter.lora.alpha") {
        Some(gguf_file::Value::F32(a)) => *a,
        Some(gguf_file::Value::F64(a)) => *a as f32,
        _ => return Err("it has no adapter.lora.alpha".into()),
    };
    if !(alpha > 0.0 && alpha.is_finite()) {
        return Err(format!(
            "adapter.lora.alpha is {alpha}: it must be a positive number"
        ));
    }
    Ok(alpha)
}

/// Which tensors hold which factor, and the rank they share.
struct FactorShapes {
    rank: usize,
    targets: BTreeSet<Target>,
    /// GGUF name → the trainer's name.
    names: Vec<(String, String)>,
}

/// Every tensor of the file is a factor `blk.N.<layer>.weight.lora_a` `(r, in)` or `.lora_b`
/// `(out, r)` of a layer `base` has, in F32 or F16, inside the file; all share one rank.
fn factor_shapes(
    base: &BaseModel,
    content: &gguf_file::Content,
    file_len: u64,
) -> std::result::Result<FactorShapes, String> {
    let mut rank = None;
    let mut targets = BTreeSet::new();
    let mut names = Vec::new();
    for (name, info) in &content.tensor_infos {
        let (block, target, factor) = parse_factor_name(name, base.config.layers)
            .ok_or_else(|| format!("{name} is not a LoRA factor of this base model's layers"))?;
        if !matches!(info.ggml_dtype, GgmlDType::F32 | GgmlDType::F16) {
            return Err(format!(
                "{name} is stored as {:?}; adapters are F32 or F16",
                info.ggml_dtype
            ));
        }
        let layer = format!("blk.{block}.{}.weight", target.gguf());
        let weight = base.qtensor(&layer).map_err(|e| e.to_string())?;
        let &[out, inp] = weight.shape().dims() else {
            return Err(format!("the base model's {layer} is not a matrix"));
        };
        let (r, fits) = match (factor, info.shape.dims()) {
            ("lora_a", &[r, cols]) => (r, cols == inp),
            ("lora_b", &[rows, r]) => (r, rows == out),
            (_, dims) => return Err(format!("{name} has shape {dims:?}, not a matrix")),
        };
        if !fits || r == 0 || r as u64 > MAX_LORA_RANK {
            return Err(format!(
                "{name} has shape {:?}, which does not fit {layer} {:?} (is it an adapter for \
                 this base model?)",
                info.shape.dims(),
                weight.shape().dims()
            ));
        }
        if *rank.get_or_insert(r) != r {
            return Err(format!("{name} has rank {r}, other factors {rank:?}"));
        }
        // The shape is bounded by now; the offsets are the file's own numbers.
        let bytes = (info.shape.elem_count() * info.ggml_dtype.type_size()) as u64;
        let end = content
            .tensor_data_offset
            .checked_add(info.offset)
            .and_then(|start| start.checked_add(bytes));
        if end.is_none_or(|end| end > file_len) {
            return Err(format!(
                "the file is truncated: {name} claims {bytes} bytes at offset {} of the data, \
                 the file has {file_len}",
                info.offset
            ));
        }
        targets.insert(target);
        names.push((name.clone(), tensor_name(block, target, factor)));
    }
    let rank = rank.ok_or("it holds no tensors")?;
    Ok(FactorShapes {
        rank,
        targets,
        names,
    })
}

/// `blk.N.<layer>.weight.lora_a` (or `lora_b`) with `N` below `layers`.
fn parse_factor_name(name: &str, layers: usize) -> Option<(usize, Target, &'static str)> {
    let rest = name.strip_prefix("blk.")?;
    let (block, rest) = rest.split_once('.')?;
    let block = catena_protocol::names::layer_number(block).filter(|&b| b < layers)?;
    let (layer, factor) = rest.split_once(".weight.")?;
    let factor = match factor {
        "lora_a" => "lora_a",
        "lora_b" => "lora_b",
        _ => return None,
    };
    let target = Target::ALL.into_iter().find(|t| t.gguf() == layer)?;
    Some((block, target, factor))
}

#[cfg(test)]
mod tests {
    use super::parse_factor_name;
    use crate::lora::Target;

    #[test]
    fn factor_names_are_read_and_anything_else_refused() {
        assert_eq!(
            parse_factor_name("blk.3.attn_q.weight.lora_a", 24),
            Some((3, Target::Q, "lora_a"))
        );
        assert_eq!(
            parse_factor_name("blk.23.ffn_down.weight.lora_b", 24),
            Some((23, Target::Down, "lora_b"))
        );
        for refused in [
            "blk.24.attn_q.weight.lora_a",
            "blk.x.attn_q.weight.lora_a",
            "blk.03.attn_q.weight.lora_a",
            "blk.+3.attn_q.weight.lora_a",
            "blk.1.attn_z.weight.lora_a",
            "blk.1.attn_q.weight.lora_c",
            "blk.1.attn_q.lora_a",
            "token_embd.weight",
        ] {
            assert_eq!(parse_factor_name(refused, 24), None, "{refused}");
        }
    }
}
