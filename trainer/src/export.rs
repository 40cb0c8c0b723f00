//! Writing a trained adapter for the two worlds that use it.
//!
//! - `adapter.gguf`: the LoRA GGUF llama.cpp loads (`catena run --adapter`): `general.type =
//!   adapter`, `adapter.type = lora`, `adapter.lora.alpha`, and per layer
//!   `blk.N.<tensor>.weight.lora_a` `(r, in)` and `.lora_b` `(out, r)`. llama.cpp scales by
//!   `alpha / r`, so an rsLoRA adapter is written with the alpha that gives the same scale.
//! - `peft/`: `adapter_model.safetensors` + `adapter_config.json` in PEFT's layout, for the
//!   Python ecosystem (transformers + peft, vLLM, TRL); read back by [`read_peft`] to continue
//!   training (RL from an SFT adapter).

use crate::lora::{LoraConfig, LoraParams, Target, tensor_name};
use crate::{Result, TrainError};
use candle_core::Tensor;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where the exports went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Exported {
    pub gguf: PathBuf,
    pub peft_dir: PathBuf,
}

/// The alpha llama.cpp must read so that its `alpha / r` equals the trained scale.
pub(crate) fn llama_alpha(params: &LoraParams) -> f32 {
    params.config.scale() * params.config.rank as f32
}

/// Writes `adapter.gguf` and `peft/` under `out`.
pub fn export(
    params: &LoraParams,
    architecture: &str,
    base_name: Option<&str>,
    out: &Path,
) -> Result<Exported> {
    std::fs::create_dir_all(out).map_err(TrainError::io(out))?;
    let gguf = out.join("adapter.gguf");
    write_gguf(params, architecture, &gguf, FactorPrecision::F32)?;
    let peft_dir = out.join("peft");
    write_peft(params, base_name, &peft_dir)?;
    Ok(Exported { gguf, peft_dir })
}

/// How the factors are stored in a GGUF adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FactorPrecision {
    /// As trained: what training and RL's rollout engine read, so their numbers agree.
    #[default]
    F32,
    /// Half the size, for an adapter that is shipped or copied around; llama.cpp reads either.
    F16,
}

/// The GGUF adapter, written to a temporary name and renamed into place.
pub fn write_gguf(
    params: &LoraParams,
    architecture: &str,
    path: &Path,
    precision: FactorPrecision,
) -> Result<()> {
    let dtype = match precision {
        FactorPrecision::F32 => GgmlDType::F32,
        FactorPrecision::F16 => GgmlDType::F16,
    };
    let mut tensors = Vec::new();
    for ((block, target), pair) in params.pairs() {
        let base = format!("blk.{block}.{}.weight", target.gguf());
        let a = QTensor::quantize(
            &pair.a.as_tensor().to_device(&candle_core::Device::Cpu)?,
            dtype,
        )?;
        let b = QTensor::quantize(
            &pair.b.as_tensor().to_device(&candle_core::Device::Cpu)?,
            dtype,
        )?;
        tensors.push((format!("{base}.lora_a"), a));
        tensors.push((format!("{base}.lora_b"), b));
    }
    let metadata = [
        (
            "general.architecture",
            gguf_file::Value::String(architecture.to_string()),
        ),
        ("general.type", gguf_file::Value::String("adapter".into())),
        (
            "general.name",
            gguf_file::Value::String("catena LoRA adapter".into()),
        ),
        ("adapter.type", gguf_file::Value::String("lora".into())),
        (
            "adapter.lora.alpha",
            gguf_file::Value::F32(llama_alpha(params)),
        ),
    ];
    let meta_refs: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tmp = path.with_extension("gguf.tmp");
    {
        let file = std::fs::File::create(&tmp).map_err(TrainError::io(&tmp))?;
        let mut writer = std::io::BufWriter::new(file);
        gguf_file::write(&mut writer, &meta_refs, &tensor_refs)?;
        use std::io::Write;
        writer.flush().map_err(TrainError::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(TrainError::io(path))
}

/// Turns a PEFT LoRA adapter trained elsewhere (TRL, verl, PEFT: `adapter_config.json` +
/// `adapter_model.safetensors`) into the GGUF adapter llama.cpp applies to `base` (a Qwen2 GGUF),
/// written to `out`. Every factor is checked against the base model's shapes first, so an adapter
/// for another model is refused with the tensor that does not fit. Returns the factors written.
pub fn peft_to_gguf(
    peft: &Path,
    base: &Path,
    out: &Path,
    precision: FactorPrecision,
) -> Result<usize> {
    let device = candle_core::Device::Cpu;
    let base_model = crate::base::BaseModel::load(base, &device)?;
    let (config, tensors) = read_peft_for(&base_model, peft, &device)?;
    let model = crate::model::Qwen2Lora::new(&base_model, &config, 0)?;
    model
        .lora
        .load(&tensors)
        .map_err(|reason| TrainError::BadCheckpoint {
            path: peft.to_path_buf(),
            reason: format!("{reason} (is it an adapter for this base model?)"),
        })?;
    write_gguf(&model.lora, "qwen2", out, precision)?;
    Ok(model.lora.pairs().count() * 2)
}

/// [`read_peft`] for `base`: the factors are allocated from `r` and the base's widths, so the
/// file must hold every one of them at that rank before anything is allocated, and a hostile
/// `r` is refused instead. Every reader that goes on to build a [`crate::model::Qwen2Lora`]
/// from a PEFT folder (the GGUF export, RL's `--init-adapter`) reads it through here.
pub(crate) fn read_peft_for(
    base: &crate::base::BaseModel,
    dir: &Path,
    device: &candle_core::Device,
) -> Result<(LoraConfig, HashMap<String, Tensor>)> {
    let (config, tensors) = read_peft(dir, device)?;
    check_factors(base, &config, &tensors).map_err(|reason| TrainError::BadCheckpoint {
        path: dir.to_path_buf(),
        reason: format!("{reason} (is it an adapter for this base model?)"),
    })?;
    Ok((config, tensors))
}

/// The largest LoRA rank read from `adapter_config.json`: far above any published adapter's
/// (8 to 256, rarely 1,024), and the factors must hold that many rows besides.
pub(crate) const MAX_LORA_RANK: u64 = 1 << 14;

/// Whether `tensors` hold every factor `config` names for `base`, each `(r, in)` or `(out, r)`
/// for its layer: what [`LoraParams::load`] checks, but before `LoraParams::init` allocates
/// `r × (in + out)` numbers for every adapted layer. An adapter that passes takes no more
/// memory than its own factors.
pub(crate) fn check_factors(
    base: &crate::base::BaseModel,
    config: &LoraConfig,
    tensors: &HashMap<String, Tensor>,
) -> std::result::Result<(), String> {
    for block in 0..base.config.layers {
        for &target in &config.targets {
            let layer = format!("blk.{block}.{}.weight", target.gguf());
            let weight = base.qtensor(&layer).map_err(|e| e.to_string())?;
            let &[out, inp] = weight.shape().dims() else {
                return Err(format!(
                    "the base model's {layer} has shape {:?}, not (out, in)",
                    weight.shape().dims()
                ));
            };
            for (factor, want) in [
                ("lora_a", [config.rank, inp]),
                ("lora_b", [out, config.rank]),
            ] {
                let name = tensor_name(block, target, factor);
                let value = tensors
                    .get(&name)
                    .ok_or_else(|| format!("it has no tensor {name}"))?;
                if value.dims() != want {
                    return Err(format!(
                        "{name} has shape {:?}, this adapter needs {want:?} (`r` = {} in \
                         adapter_config.json)",
                        value.dims(),
                        config.rank
                    ));
                }
            }
        }
    }
    Ok(())
}

/// PEFT's module path of a factor.
pub(crate) fn peft_key(block: usize, target: Target, factor: &str) -> String {
    format!(
        "base_model.model.model.layers.{block}.{}.{factor}.weight",
        target.peft()
    )
}

/// `adapter_model.safetensors` and `adapter_config.json`.
pub(crate) fn write_peft(params: &LoraParams, base_name: Option<&str>, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
    let mut map: HashMap<String, Tensor> = HashMap::new();
    for ((block, target), pair) in params.pairs() {
        map.insert(
            peft_key(*block, *target, "lora_A"),
            pair.a.as_tensor().clone(),
        );
        map.insert(
            peft_key(*block, *target, "lora_B"),
            pair.b.as_tensor().clone(),
        );
    }
    candle_core::safetensors::save(&map, dir.join("adapter_model.safetensors"))?;
    let c = &params.config;
    let config = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_name.unwrap_or(""),
        "r": c.rank,
        "lora_alpha": c.alpha,
        "lora_dropout": c.dropout,
        "use_rslora": c.rslora,
        "target_modules": c.targets.iter().map(|t| t.peft().rsplit('.').next().unwrap_or_default()).collect::<Vec<_>>(),
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
    });
    let json =
        serde_json::to_vec_pretty(&config).map_err(|e| TrainError::Stopped(e.to_string()))?;
    let path = dir.join("adapter_config.json");
    std::fs::write(&path, json).map_err(TrainError::io(&path))
}

/// Reads a PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`, as
/// [`write_peft`] writes it) back: its shape, and its factors under the trainer's names, ready
/// for [`LoraParams::load`]. This is how RL starts from an SFT adapter.
pub(crate) fn read_peft(
    dir: &Path,
    device: &candle_core::Device,
) -> Result<(LoraConfig, HashMap<String, Tensor>)> {
    let config = read_peft_config(dir)?;
    let tensors = read_peft_factors(dir, config.rank, device)?;
    Ok((config, tensors))
}

/// The error for something wrong in the adapter folder `dir`.
fn bad_adapter(dir: &Path, reason: String) -> TrainError {
    TrainError::BadCheckpoint {
        path: dir.to_path_buf(),
        reason,
    }
}

/// `adapter_config.json`'s shape, every number range-checked before anything is allocated
/// from it.
fn read_peft_config(dir: &Path) -> Result<LoraConfig> {
    let bad = |reason: String| bad_adapter(dir, reason);
    let config_path = dir.join("adapter_config.json");
    let text = std::fs::read(&config_path).map_err(|e| {
        bad(format!(
            "adapter_config.json: {e} (pass a PEFT adapter folder)"
        ))
    })?;
    let json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("adapter_config.json: {e}")))?;
    let rank = peft_rank(&json).map_err(bad)?;
    let use_rslora = json["use_rslora"].as_bool().unwrap_or(false);
    let alpha = peft_alpha(&json, rank, use_rslora).map_err(bad)?;
    let targets = peft_targets(&json).map_err(bad)?;
    Ok(LoraConfig {
        rank,
        alpha,
        dropout: 0.0,
        rslora: use_rslora,
        targets,
    })
}

/// Why `field` of `adapter_config.json` is refused.
fn out_of_range(field: &str, value: &serde_json::Value, accepted: &str) -> String {
    format!("adapter_config.json: `{field}` is {value}, out of range: it must be {accepted}")
}

/// The rank `r`: a whole number from 1 to [`MAX_LORA_RANK`].
fn peft_rank(json: &serde_json::Value) -> Result<usize, String> {
    let r = &json["r"];
    if r.is_null() {
        return Err("adapter_config.json: no rank `r`".into());
    }
    match r.as_u64() {
        Some(n) if (1..=MAX_LORA_RANK).contains(&n) => Ok(n as usize),
        _ => Err(out_of_range(
            "r",
            r,
            &format!("a whole number from 1 to {MAX_LORA_RANK}"),
        )),
    }
}

/// `lora_alpha`: positive, and with a scale llama.cpp's f32 `llama_alpha` holds.
fn peft_alpha(json: &serde_json::Value, rank: usize, use_rslora: bool) -> Result<f32, String> {
    let value = &json["lora_alpha"];
    if value.is_null() {
        return Err("adapter_config.json: no `lora_alpha`".into());
    }
    let alpha = value.as_f64().unwrap_or(f64::NAN) as f32;
    // llama.cpp reads the scale back as an f32 alpha (`llama_alpha`): it must be finite.
    let for_llama = if use_rslora {
        alpha * (rank as f32).sqrt()
    } else {
        alpha
    };
    let fits = alpha > 0.0 && alpha.is_finite() && for_llama.is_finite();
    if !fits {
        return Err(out_of_range(
            "lora_alpha",
            value,
            "a positive number whose scale an f32 holds",
        ));
    }
    Ok(alpha)
}

/// `target_modules`: at least one, each a layer the trainer knows.
fn peft_targets(json: &serde_json::Value) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for name in json["target_modules"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        let target = Target::parse(name)
            .ok_or_else(|| format!("adapter_config.json: unknown target module `{name}`"))?;
        targets.push(target);
    }
    if targets.is_empty() {
        return Err("adapter_config.json: no `target_modules`".into());
    }
    Ok(targets)
}

/// `adapter_model.safetensors`' factors under the trainer's names, each of `rank` (what the
/// factors are allocated from); any other tensor is refused.
fn read_peft_factors(
    dir: &Path,
    rank: usize,
    device: &candle_core::Device,
) -> Result<HashMap<String, Tensor>> {
    let bad = |reason: String| bad_adapter(dir, reason);
    let weights = candle_core::safetensors::load(dir.join("adapter_model.safetensors"), device)
        .map_err(|e| bad(format!("adapter_model.safetensors: {e}")))?;
    let mut tensors = HashMap::new();
    for (key, value) in weights {
        // Every factor has the configuration's rank: `r` is what the factors are allocated from.
        let rank_dim = |name: &str| match value.dims() {
            [rows, _] if name.ends_with("lora_a") => Some(*rows),
            [_, cols] => Some(*cols),
            _ => None,
        };
        match trainer_name(&key) {
            Some(name) if rank_dim(&name) != Some(rank) => {
                return Err(bad(format!(
                    "`{key}` has shape {:?}, this adapter needs rank {rank} (`r` in \
                     adapter_config.json)",
                    value.dims()
                )));
            }
            Some(name) => {
                tensors.insert(name, value.to_dtype(candle_core::DType::F32)?);
            }
            None => return Err(bad(format!("unexpected tensor `{key}`"))),
        }
    }
    Ok(tensors)
}

/// The trainer's name for PEFT's
/// `base_model.model.model.layers.{block}.{module}.{lora_A|lora_B}.weight`.
fn trainer_name(key: &str) -> Option<String> {
    let rest = key
        .strip_prefix("base_model.model.model.layers.")?
        .strip_suffix(".weight")?;
    let (block, rest) = rest.split_once('.')?;
    let (module, factor) = rest.rsplit_once('.')?;
    let target = Target::ALL.into_iter().find(|t| t.peft() == module)?;
    let factor = match factor {
        "lora_A" => "lora_a",
        "lora_B" => "lora_b",
        _ => return None,
    };
    let block = catena_protocol::names::layer_number(block)?;
    Some(tensor_name(block, target, factor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn tiny_shape(_block: usize, t: Target) -> (usize, usize) {
        if t == Target::Down {
            (32, 64)
        } else {
            (32, 32)
        }
    }

    #[test]
    fn both_exports_hold_every_factor_in_peft_orientation() -> Result<()> {
        let dev = Device::Cpu;
        let config = LoraConfig {
            rank: 4,
            alpha: 8.0,
            rslora: true,
            targets: vec![Target::Q, Target::Down],
            ..LoraConfig::default()
        };
        let params = LoraParams::init(&config, 2, tiny_shape, 1, &dev)?;
        let out = tempfile::tempdir().unwrap();
        let exported = export(&params, "qwen2", Some("tiny"), out.path())?;

        let mut file = std::fs::File::open(&exported.gguf).unwrap();
        let content = gguf_file::Content::read(&mut file)?;
        assert_eq!(content.metadata["general.type"].to_string()?, "adapter");
        // rsLoRA: scale 8/sqrt(4) = 4, written as alpha 16 for llama.cpp's alpha/r.
        assert_eq!(content.metadata["adapter.lora.alpha"].to_f32()?, 16.0);
        assert_eq!(content.tensor_infos.len(), 2 * 2 * 2);
        let a = &content.tensor_infos["blk.1.ffn_down.weight.lora_a"];
        assert_eq!(a.shape.dims(), &[4, 64]);
        let b = content.tensor(&mut file, "blk.1.ffn_down.weight.lora_b", &dev)?;
        assert_eq!(b.shape().dims(), &[32, 4]);

        let peft = candle_core::safetensors::load(
            exported.peft_dir.join("adapter_model.safetensors"),
            &dev,
        )?;
        let key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
        let want = params.get(0, Target::Q).unwrap().a.as_tensor();
        let diff = (&peft[key] - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        let cfg: serde_json::Value = serde_json::from_slice(
            &std::fs::read(exported.peft_dir.join("adapter_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            cfg["target_modules"],
            serde_json::json!(["q_proj", "down_proj"])
        );
        assert_eq!(cfg["use_rslora"], true);
        // And back: the same shape and the same values under the trainer's names.
        let (read_config, tensors) = read_peft(&exported.peft_dir, &dev)?;
        assert_eq!(read_config, config);
        let reloaded = LoraParams::init(&read_config, 2, tiny_shape, 9, &dev)?;
        reloaded.load(&tensors).unwrap();
        for ((name, a), (_, b)) in params.named().into_iter().zip(reloaded.named()) {
            let diff = (a.as_tensor() - b.as_tensor())?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{name}");
        }
        Ok(())
    }

    /// A PEFT folder of a small adapter: rank 4 on the query projection of one layer.
    fn small_peft() -> tempfile::TempDir {
        let config = LoraConfig {
            rank: 4,
            targets: vec![Target::Q],
            ..LoraConfig::default()
        };
        let params = LoraParams::init(&config, 1, tiny_shape, 1, &Device::Cpu).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_peft(&params, None, dir.path()).unwrap();
        dir
    }

    /// A PEFT folder of a small adapter with `edit` applied to its adapter_config.json; the
    /// error `read_peft` gives for it.
    fn read_edited(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let (dev, dir) = (Device::Cpu, small_peft());
        let path = dir.path().join("adapter_config.json");
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut json);
        std::fs::write(&path, json.to_string()).unwrap();
        match read_peft(dir.path(), &dev) {
            Ok(_) => "accepted".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Layer "00" was layer 0 again: whichever of the two the map read last was used.
    #[test]
    fn a_layer_number_spelled_otherwise_is_refused() {
        let (dev, dir) = (Device::Cpu, small_peft());
        let path = dir.path().join("adapter_model.safetensors");
        let mut factors = candle_core::safetensors::load(&path, &dev).unwrap();
        let key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
        let again = factors[key].zeros_like().unwrap();
        factors.insert(key.replace("layers.0.", "layers.00."), again);
        candle_core::safetensors::save(&factors, &path).unwrap();
        let err = read_peft(dir.path(), &dev).err().unwrap().to_string();
        assert!(
            err.contains(
                "unexpected tensor \
                 `base_model.model.model.layers.00.self_attn.q_proj.lora_A.weight`"
            ),
            "{err}"
        );
    }

    /// `r: 1e12` used to be allocated (rank × width numbers per layer) and abort the import.
    #[test]
    fn rank_and_alpha_out_of_range_are_refused_by_name() {
        assert_eq!(read_edited(|_| {}), "accepted");
        for (field, value, expected) in [
            (
                "r",
                serde_json::json!(1_000_000_000_000u64),
                "`r` is 1000000000000, out of range",
            ),
            (
                "r",
                serde_json::json!(1e12),
                "`r` is 1000000000000.0, out of range",
            ),
            ("r", serde_json::json!(0), "`r` is 0, out of range"),
            ("r", serde_json::json!(-4), "`r` is -4, out of range"),
            (
                "lora_alpha",
                serde_json::json!(0.0),
                "`lora_alpha` is 0.0, out of range",
            ),
            (
                "lora_alpha",
                serde_json::json!(-8),
                "`lora_alpha` is -8, out of range",
            ),
            (
                "lora_alpha",
                serde_json::json!(1e39),
                "`lora_alpha` is 1e+39, out of range",
            ),
        ] {
            let err = read_edited(|c| c[field] = value.clone());
            assert!(err.contains(expected), "{field} = {value}: {err}");
        }
        // Within the range, but not the factors' rank.
        let err = read_edited(|c| c["r"] = 8.into());
        assert!(err.contains("this adapter needs rank 8"), "{err}");
        // rsLoRA's scale for llama.cpp (alpha × √r) must fit an f32 too.
        let err = read_edited(|c| {
            c["use_rslora"] = true.into();
            c["lora_alpha"] = 3e38.into();
        });
        assert!(err.contains("`lora_alpha`"), "{err}");
    }
}
