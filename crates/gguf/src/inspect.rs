//! What a GGUF file is, checked in Rust before llama.cpp sees it: the header's facts (architecture,
//! quantisation, shape, context), where every tensor's data lies in the file, and every reason the
//! vendored llama.cpp would refuse it or produce garbage (an unknown architecture, a truncated or
//! overlapping data section, an unknown tensor type). `catena models inspect FILE` prints it; the
//! planner reads the sizes from it.

use crate::header::{GgufError, GgufHeader, MetaValue, ggml_type_layout, ggml_type_name};
use crate::hyperparameters::{self, first_u64};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The architectures the vendored llama.cpp knows (generated from its `LLM_ARCH_NAMES`).
const LLAMA_ARCHITECTURES: &str = include_str!("llama_architectures.txt");

/// Architectures llama.cpp loads that cannot write a trajectory (encoders, projectors, codecs).
pub const NOT_GENERATIVE: &[&str] = &[
    "bert",
    "nomic-bert",
    "nomic-bert-moe",
    "jina-bert-v2",
    "jina-bert-v3",
    "neo-bert",
    "modern-bert",
    "eurobert",
    "t5encoder",
    "clip",
    "wavtokenizer-dec",
    "llama-embed",
    "gemma-embedding",
];

/// Whether the vendored llama.cpp knows `architecture`.
pub fn llama_supports(architecture: &str) -> bool {
    known_architectures().any(|a| a == architecture)
}

fn known_architectures() -> impl Iterator<Item = &'static str> {
    LLAMA_ARCHITECTURES
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The shape numbers of a transformer that sizing needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Shape {
    pub layers: Option<u64>,
    pub context_length: Option<u64>,
    pub embedding_length: Option<u64>,
    pub heads: Option<u64>,
    pub heads_kv: Option<u64>,
    pub vocab_size: Option<u64>,
    /// Bytes of F16 KV cache one token takes across all layers (keys and values).
    pub kv_bytes_per_token_f16: Option<u64>,
}

/// Everything `catena models inspect` reports about a file.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub path: PathBuf,
    pub file_size: u64,
    pub gguf_version: u32,
    /// `model` or `adapter` (`general.type`; files without it are models).
    pub kind: String,
    pub name: Option<String>,
    pub architecture: Option<String>,
    pub architecture_supported: bool,
    pub generative: bool,
    /// The quantisation named by `general.file_type` (`Q4_K_M`), when present.
    pub quantization: Option<String>,
    pub parameters: u64,
    pub shape: Shape,
    pub chat_template: bool,
    pub metadata_entries: usize,
    pub tensor_count: usize,
    /// Tensors per ggml type (`Q4_K: 145`).
    pub tensor_types: BTreeMap<String, usize>,
    /// Absolute offset of the tensor data.
    pub data_offset: u64,
    /// The size the file must have: the end of its last tensor's data.
    pub expected_size: u64,
    /// Bytes of tensor data in repeating blocks (`blk.N.*`), per block, on average.
    pub bytes_per_layer: u64,
    /// Bytes of tensor data outside the blocks (embeddings, output head, norms).
    pub bytes_outside_layers: u64,
    /// Why llama.cpp would refuse the file or misread it; empty when it is usable.
    pub problems: Vec<String>,
}

impl Inspection {
    /// No problem was found.
    pub fn usable(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads and checks a GGUF file. An error means the header itself cannot be read; a file whose
/// header reads but whose content is wrong comes back with `problems`.
pub fn inspect_file(path: &Path) -> Result<Inspection, GgufError> {
    let header = GgufHeader::read(path)?;
    Ok(inspect(path, &header))
}

/// Checks a parsed header (and the file length it was read with).
pub fn inspect(path: &Path, header: &GgufHeader) -> Inspection {
    let mut problems = Vec::new();
    let architecture = header.architecture().map(str::to_string);
    let kind = header.file_type().unwrap_or("model").to_string();
    let architecture_supported = architecture.as_deref().is_some_and(llama_supports);
    match architecture.as_deref() {
        None => problems.push("no general.architecture in the metadata".to_string()),
        Some(arch) if !architecture_supported => problems.push(format!(
            "architecture {arch:?} is not one the bundled llama.cpp knows"
        )),
        Some(_) => {}
    }
    let generative = architecture
        .as_deref()
        .is_some_and(|a| architecture_supported && !NOT_GENERATIVE.contains(&a));
    if kind == "model" && architecture_supported && !generative {
        problems.push(format!(
            "architecture {:?} is an encoder or projector, not a model that writes text",
            architecture.as_deref().unwrap_or_default()
        ));
    }
    if let Some(arch) = architecture.as_deref().filter(|_| generative) {
        problems.extend(hyperparameters::problems(header, arch));
    }
    let layout = check_tensors(header, &mut problems);
    let shape = shape(header, architecture.as_deref());
    Inspection {
        path: path.to_path_buf(),
        file_size: header.file_len,
        gguf_version: header.version,
        kind,
        name: header.get_str("general.name").map(str::to_string),
        architecture_supported,
        generative,
        quantization: header
            .get_u64("general.file_type")
            .and_then(file_type_name)
            .map(str::to_string),
        parameters: layout.parameters,
        chat_template: header.get_str("tokenizer.chat_template").is_some(),
        metadata_entries: header.metadata.len(),
        tensor_count: header.tensors.len(),
        tensor_types: layout.types,
        data_offset: header.data_offset,
        expected_size: layout.end,
        bytes_per_layer: shape
            .layers
            .filter(|&n| n > 0)
            .map_or(0, |n| layout.layer_bytes / n),
        bytes_outside_layers: layout.other_bytes,
        shape,
        architecture,
        problems,
    }
}

/// What the tensor table adds up to.
#[derive(Default)]
struct Layout {
    parameters: u64,
    types: BTreeMap<String, usize>,
    end: u64,
    layer_bytes: u64,
    other_bytes: u64,
}

/// Checks that every tensor has a known type, aligned data inside the file, and no overlap with
/// another tensor's data.
fn check_tensors(header: &GgufHeader, problems: &mut Vec<String>) -> Layout {
    // The header's reader has refused any alignment but a power of two.
    let alignment = header.get_u64("general.alignment").unwrap_or(32);
    let mut layout = Layout {
        end: header.data_offset,
        ..Layout::default()
    };
    let mut spans = Vec::with_capacity(header.tensors.len());
    for t in &header.tensors {
        *layout.types.entry(ggml_type_name(t.ggml_type)).or_default() += 1;
        let elements = t
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX);
        layout.parameters = layout.parameters.saturating_add(elements);
        let Some(len) = t.data_len() else {
            problems.push(format!(
                "tensor {} has a type ({}) the bundled ggml does not know",
                t.name, t.ggml_type
            ));
            continue;
        };
        if let Some((block, _)) = ggml_type_layout(t.ggml_type)
            && t.dims.first().is_some_and(|&row| row % block != 0)
        {
            problems.push(format!(
                "tensor {} has rows of {} elements, not a multiple of its type's block of {block}",
                t.name, t.dims[0]
            ));
        }
        if t.offset % alignment != 0 {
            problems.push(format!(
                "tensor {} starts at offset {}, not aligned to {alignment}",
                t.name, t.offset
            ));
        }
        let start = header.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(len);
        layout.end = layout.end.max(end);
        if t.name.starts_with("blk.") {
            layout.layer_bytes = layout.layer_bytes.saturating_add(len);
        } else {
            layout.other_bytes = layout.other_bytes.saturating_add(len);
        }
        spans.push((start, end, t.name.as_str()));
    }
    // llama.cpp refuses a file with a tensor name twice.
    let mut names: Vec<&str> = header.tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        problems.push(format!("the tensor {} appears twice", pair[0]));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, end_a, a), (start_b, _, b)) = (pair[0], pair[1]);
        if start_b < end_a {
            problems.push(format!("the data of tensors {a} and {b} overlap"));
        }
    }
    if layout.end > header.file_len {
        problems.push(format!(
            "the file is truncated: its tensors end at byte {}, but it has {} (an interrupted download?)",
            layout.end, header.file_len
        ));
    }
    if header.tensors.is_empty() {
        problems.push("the file holds no tensors".to_string());
    }
    layout
}

fn shape(header: &GgufHeader, architecture: Option<&str>) -> Shape {
    let Some(arch) = architecture else {
        return Shape::default();
    };
    let get = |key: &str| header.get_u64(&format!("{arch}.{key}"));
    let layers = get("block_count");
    let embedding_length = get("embedding_length");
    let heads = first_u64(header, &format!("{arch}.attention.head_count"));
    let heads_kv = first_u64(header, &format!("{arch}.attention.head_count_kv")).or(heads);
    let key_length =
        get("attention.key_length").or_else(|| Some(embedding_length? / heads.filter(|&h| h > 0)?));
    let value_length = get("attention.value_length").or(key_length);
    let kv_bytes_per_token_f16 = (|| {
        let per_layer = heads_kv?.checked_mul(key_length? + value_length?)?;
        per_layer.checked_mul(layers?)?.checked_mul(2)
    })();
    let vocab_size = match header.metadata.get("tokenizer.ggml.tokens") {
        Some(MetaValue::LongArray { len, .. }) => Some(*len),
        Some(MetaValue::Array(items)) => Some(items.len() as u64),
        _ => get("vocab_size"),
    };
    Shape {
        layers,
        context_length: get("context_length"),
        embedding_length,
        heads,
        heads_kv,
        vocab_size,
        kv_bytes_per_token_f16,
    }
}

/// The quantisation a `general.file_type` (llama.cpp's `llama_ftype`) stands for.
pub fn file_type_name(file_type: u64) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

/// Bytes as a person reads them.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        writeln!(f, "{}", self.path.display())?;
        writeln!(
            f,
            "  file          {} ({} bytes), GGUF v{}, {}",
            human_bytes(self.file_size),
            self.file_size,
            self.gguf_version,
            self.kind
        )?;
        if let Some(name) = &self.name {
            writeln!(f, "  name          {name}")?;
        }
        writeln!(
            f,
            "  architecture  {} ({})",
            self.architecture.as_deref().unwrap_or("-"),
            match (self.architecture_supported, self.generative) {
                (true, true) => "supported",
                (true, false) => "supported, not generative",
                (false, _) => "NOT supported by the bundled llama.cpp",
            }
        )?;
        writeln!(
            f,
            "  quantisation  {}",
            self.quantization.as_deref().unwrap_or("-")
        )?;
        writeln!(f, "  parameters    {:.2} B", self.parameters as f64 / 1e9)?;
        let s = &self.shape;
        writeln!(
            f,
            "  shape         {} layers, embedding {}, heads {} (kv {}), vocabulary {}",
            opt(s.layers),
            opt(s.embedding_length),
            opt(s.heads),
            opt(s.heads_kv),
            opt(s.vocab_size)
        )?;
        writeln!(
            f,
            "  context       {} tokens trained; KV cache {} per token (F16)",
            opt(s.context_length),
            s.kv_bytes_per_token_f16
                .map_or_else(|| "-".to_string(), human_bytes)
        )?;
        writeln!(
            f,
            "  chat template {}",
            if self.chat_template { "yes" } else { "no" }
        )?;
        let types: Vec<String> = self
            .tensor_types
            .iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect();
        writeln!(
            f,
            "  tensors       {} ({}); {} metadata entries",
            self.tensor_count,
            types.join(", "),
            self.metadata_entries
        )?;
        writeln!(
            f,
            "  data          from byte {} to {} (expected size {}); {} per layer, {} outside layers",
            self.data_offset,
            self.expected_size,
            human_bytes(self.expected_size),
            human_bytes(self.bytes_per_layer),
            human_bytes(self.bytes_outside_layers)
        )?;
        if self.problems.is_empty() {
            write!(f, "  verdict       usable")
        } else {
            write!(f, "  verdict       NOT usable:")?;
            for problem in &self.problems {
                write!(f, "\n    - {problem}")?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::tests::write_gguf;

    fn header(kv: &[(&str, MetaValue)], tensors: &[(&str, Vec<u64>)], data: bool) -> GgufHeader {
        let bytes = write_gguf(kv, tensors, data);
        GgufHeader::parse(bytes.as_slice(), bytes.len() as u64).unwrap()
    }

    fn qwen_kv() -> Vec<(&'static str, MetaValue)> {
        vec![
            ("general.architecture", MetaValue::String("qwen2".into())),
            ("qwen2.block_count", MetaValue::U32(2)),
            ("qwen2.embedding_length", MetaValue::U32(64)),
            ("qwen2.attention.head_count", MetaValue::U32(8)),
            ("qwen2.attention.head_count_kv", MetaValue::U32(2)),
            ("qwen2.context_length", MetaValue::U32(4096)),
        ]
    }

    #[test]
    fn a_whole_small_model_is_usable_and_sized() {
        let h = header(
            &qwen_kv(),
            &[
                ("token_embd.weight", vec![64, 10]),
                ("blk.0.attn_q.weight", vec![64, 64]),
                ("blk.1.attn_q.weight", vec![64, 64]),
            ],
            true,
        );
        let report = inspect(Path::new("m.gguf"), &h);
        assert!(report.usable(), "{:?}", report.problems);
        assert_eq!(report.parameters, 640 + 2 * 4096);
        assert_eq!(report.bytes_per_layer, 4096 * 4);
        assert_eq!(report.bytes_outside_layers, 640 * 4);
        assert_eq!(report.expected_size, report.file_size);
        // 2 layers x 2 kv heads x (8 + 8) dims x 2 bytes.
        assert_eq!(report.shape.kv_bytes_per_token_f16, Some(2 * 2 * 16 * 2));
        assert!(report.to_string().contains("verdict       usable"));
    }

    #[test]
    fn missing_data_unknown_architecture_and_encoders_are_problems() {
        let cut = header(&qwen_kv(), &[("blk.0.attn_q.weight", vec![64, 64])], false);
        let report = inspect(Path::new("m.gguf"), &cut);
        assert!(report.problems.iter().any(|p| p.contains("truncated")));

        let alien = header(
            &[("general.architecture", MetaValue::String("martian".into()))],
            &[("w", vec![4])],
            true,
        );
        let report = inspect(Path::new("m.gguf"), &alien);
        assert!(!report.architecture_supported);
        assert!(report.problems.iter().any(|p| p.contains("martian")));

        let bert = header(
            &[("general.architecture", MetaValue::String("bert".into()))],
            &[("w", vec![4])],
            true,
        );
        let report = inspect(Path::new("m.gguf"), &bert);
        assert!(report.architecture_supported && !report.generative);
        assert!(!report.usable());

        let twice = header(
            &qwen_kv(),
            &[
                ("blk.0.attn_q.weight", vec![4]),
                ("blk.0.attn_q.weight", vec![4]),
            ],
            true,
        );
        let report = inspect(Path::new("m.gguf"), &twice);
        assert!(
            report.problems == ["the tensor blk.0.attn_q.weight appears twice"],
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn the_architecture_list_matches_the_vendored_llama_cpp() {
        // The crate's sources are in cargo's registry whenever this crate builds.
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
            .expect("a cargo home");
        let source = std::fs::read_dir(home.join("registry/src"))
            .expect("cargo's registry sources")
            .filter_map(Result::ok)
            .map(|d| {
                d.path()
                    .join("llama-cpp-sys-2-0.1.161/llama.cpp/src/llama-arch.cpp")
            })
            .find(|p| p.is_file())
            .expect("the vendored llama-arch.cpp");
        let text = std::fs::read_to_string(source).unwrap();
        let table = text
            .split("LLM_ARCH_NAMES = {")
            .nth(1)
            .and_then(|rest| rest.split("\n};").next())
            .unwrap();
        let vendored: Vec<&str> = table
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|name| *name != "(unknown)")
            .collect();
        let ours: Vec<&str> = known_architectures().collect();
        assert_eq!(ours, vendored);
    }
}
