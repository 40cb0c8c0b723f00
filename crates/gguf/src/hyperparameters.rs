//! The hyperparameters llama.cpp asserts on while loading a model, checked first.
//!
//! llama.cpp reads a model's shape from its metadata and stops the whole process
//! (`GGML_ASSERT`, `abort`) on some values it cannot use, rather than returning an error:
//! `llama_model_base::load_hparams` for every architecture, and the graph builders of Qwen2,
//! Qwen3 and Llama for their head sizes. A file with such a value (a hostile one, or a careless
//! edit) would kill `catena run`, or the model worker of `catena serve`, with nothing but the
//! assertion's source line. These are the same conditions, named in words, so that the file is
//! refused as a bad model before llama.cpp sees it. The bounds are those of the vendored
//! llama.cpp (`LLAMA_MAX_LAYERS`, `LLAMA_MAX_EXPERTS`, `LLAMA_ROPE_SCALING_TYPES`). Two values
//! llama.cpp takes without asserting are refused with them: 0 rotary dimensions (a decode step
//! that never ended) and a trained context of 0 tokens (llama.cpp then made a context of 256,
//! which no prompt of Catena's fits, and the plan said "context 0 tokens").

use crate::header::{GgufHeader, MetaValue};

/// llama.cpp's `LLAMA_MAX_LAYERS`.
const MAX_LAYERS: u64 = 512;
/// The largest count llama.cpp's API passes on (a C `int32_t`).
const MAX_INT32: u64 = i32::MAX as u64;
/// llama.cpp's `LLAMA_MAX_EXPERTS`.
const MAX_EXPERTS: u64 = 1024;
/// The `rope.scaling.type` names llama.cpp knows.
const ROPE_SCALING_TYPES: [&str; 4] = ["none", "linear", "yarn", "longrope"];
/// Architectures whose graph asserts that a head's key, value and rotary sizes are equal (the
/// ones Catena converts checkpoints to; many others assert it too and are left to llama.cpp).
const EQUAL_HEAD_SIZES: [&str; 3] = ["qwen2", "qwen3", "llama"];
/// Architectures for which llama.cpp reads an expert count of one as none.
const ONE_EXPERT_IS_NONE: [&str; 2] = ["hunyuan-dense", "hunyuan_vl"];

/// What in `header` (a model of architecture `arch`) llama.cpp would abort on or could not run,
/// in words; empty when nothing.
pub fn problems(header: &GgufHeader, arch: &str) -> Vec<String> {
    let key = |name: &str| format!("{arch}.{name}");
    let get = |name: &str| header.get_u64(&key(name));
    let mut problems = Vec::new();
    let layers = get("block_count");
    match layers {
        None => problems.push(format!("no {}", key("block_count"))),
        Some(n) if !(1..=MAX_LAYERS).contains(&n) => problems.push(format!(
            "{} is {n}; llama.cpp runs 1 to {MAX_LAYERS} layers",
            key("block_count")
        )),
        Some(_) => {}
    }
    match get("context_length") {
        None => problems.push(format!("no {}", key("context_length"))),
        Some(0) => problems.push(format!(
            "{} is 0: the model names no context it was trained for",
            key("context_length")
        )),
        _ => {}
    }
    match get("embedding_length") {
        None => problems.push(format!("no {}", key("embedding_length"))),
        Some(0) => problems.push(format!("{} is 0", key("embedding_length"))),
        _ => {}
    }
    // llama.cpp hands these out as signed 32-bit integers: a training context of 2^32 - 1 made
    // every load panic in the Rust binding (exit 101).
    for name in [
        "context_length",
        "embedding_length",
        "attention.head_count",
        "attention.head_count_kv",
    ] {
        if let Some(n) = first_u64(header, &key(name)).filter(|&n| n > MAX_INT32) {
            problems.push(format!(
                "{} is {n}, more than the {MAX_INT32} llama.cpp accepts",
                key(name)
            ));
        }
    }
    if let (Some(nextn), Some(layers)) = (get("nextn_predict_layers"), layers)
        && nextn > layers
    {
        problems.push(format!(
            "{} is {nextn}, more than the model's {layers} layers",
            key("nextn_predict_layers")
        ));
    }
    experts(header, arch, &mut problems);
    if let Some(scaling) = header.get_str(&key("rope.scaling.type"))
        && !ROPE_SCALING_TYPES.contains(&scaling)
    {
        problems.push(format!(
            "{} is {scaling:?}; llama.cpp knows {}",
            key("rope.scaling.type"),
            ROPE_SCALING_TYPES.join(", ")
        ));
    }
    head_sizes(header, arch, &mut problems);
    problems
}

/// The expert counts of a mixture of experts, and that a dense model names none in use.
fn experts(header: &GgufHeader, arch: &str, problems: &mut Vec<String>) {
    let key = |name: &str| format!("{arch}.{name}");
    let get = |name: &str| header.get_u64(&key(name)).unwrap_or(0);
    let mut experts = get("expert_count");
    // One number, or one per layer (the most is what llama.cpp checks); an array too long to
    // keep in the header is left to llama.cpp.
    let mut used = match header.metadata.get(&key("expert_used_count")) {
        Some(MetaValue::Array(items)) => items.iter().filter_map(MetaValue::as_u64).max(),
        Some(MetaValue::LongArray { .. }) => None,
        Some(value) => value.as_u64(),
        None => Some(0),
    };
    if ONE_EXPERT_IS_NONE.contains(&arch) && experts <= 1 {
        experts = 0;
        used = Some(0);
    }
    let groups = get("expert_group_count");
    let mut say = |what: String| problems.push(format!("{what} (llama.cpp cannot load it)"));
    if experts > MAX_EXPERTS {
        say(format!(
            "{} is {experts}, more than {MAX_EXPERTS}",
            key("expert_count")
        ));
    }
    match used {
        Some(used) if used > experts => say(format!(
            "{} is {used}, more than the {experts} experts of {}",
            key("expert_used_count"),
            key("expert_count")
        )),
        Some(0) if experts > 0 => say(format!(
            "{} names {experts} experts and {} none in use",
            key("expert_count"),
            key("expert_used_count")
        )),
        _ => {}
    }
    if experts == 0 {
        if groups != 0 {
            say(format!(
                "{} is {groups} in a model without experts",
                key("expert_group_count")
            ));
        }
        return;
    }
    let group_used = get("expert_group_used_count");
    if groups >= experts {
        say(format!(
            "{} is {groups}, not fewer than the {experts} experts",
            key("expert_group_count")
        ));
    } else if groups > 1 && (experts % groups != 0 || group_used == 0 || group_used >= groups) {
        say(format!(
            "{experts} experts in {groups} groups with {group_used} in use: the groups must divide \
             the experts, and some but not all of them be in use"
        ));
    }
}

/// The rotary dimensions fit a head's key: ggml's rope asserts an even count no larger, and with
/// a count of 0 it never finished a decode step (a Gemma 3 model so changed hung `catena run`).
/// In the architectures of [`EQUAL_HEAD_SIZES`] the key, value and rotary sizes are one size.
fn head_sizes(header: &GgufHeader, arch: &str, problems: &mut Vec<String>) {
    let key = |name: &str| format!("{arch}.{name}");
    let get = |name: &str| header.get_u64(&key(name));
    // llama.cpp reads the first layer's head count when it is given per layer, and derives no
    // head size without heads.
    let heads = first_u64(header, &key("attention.head_count"));
    let derived = get("embedding_length").zip(heads.filter(|&h| h > 0));
    let derived = derived.map(|(embedding, heads)| embedding / heads);
    let key_size = get("attention.key_length").or(derived);
    let rotary = get("rope.dimension_count");
    // The sliding-window layers' sizes default to the others'.
    let swa_key_size = get("attention.key_length_swa").or(key_size);
    let swa_rotary = get("rope.dimension_count_swa");
    let mut fits = true;
    for (name, rotary, key_size) in [
        ("rope.dimension_count", rotary, key_size),
        ("rope.dimension_count_swa", swa_rotary, swa_key_size),
    ] {
        let Some(rotary) = rotary else { continue };
        if rotary == 0 || rotary % 2 != 0 || key_size.is_some_and(|size| rotary > size) {
            let size = key_size.map_or(String::new(), |n| format!(" of {n}"));
            problems.push(format!(
                "{} is {rotary}; llama.cpp rotates an even number of a head's key dimensions{size}, \
                 at least 2",
                key(name)
            ));
            fits = false;
        }
    }
    if !fits || !EQUAL_HEAD_SIZES.contains(&arch) {
        return;
    }
    let (Some(key_size), Some(derived)) = (key_size, derived) else {
        return;
    };
    let value_size = get("attention.value_length").unwrap_or(derived);
    let rotary = rotary.unwrap_or(key_size);
    if key_size != value_size || rotary != value_size {
        problems.push(format!(
            "a head's key size {key_size}, value size {value_size} and rotary dimensions \
             {rotary} ({}) differ; llama.cpp's {arch} needs them equal",
            key("rope.dimension_count")
        ));
    }
}

/// A number, or the first of a per-layer array of numbers (as llama.cpp reads the first layer's).
pub(crate) fn first_u64(header: &GgufHeader, key: &str) -> Option<u64> {
    match header.metadata.get(key)? {
        MetaValue::Array(items) => items.first().and_then(MetaValue::as_u64),
        value => value.as_u64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::tests::write_gguf;

    fn problems_of(kv: &[(&str, MetaValue)], arch: &str) -> Vec<String> {
        let bytes = write_gguf(kv, &[("a", vec![4])], true);
        let header = GgufHeader::parse(&bytes[..], bytes.len() as u64).unwrap();
        problems(&header, arch)
    }

    fn qwen(extra: &[(&'static str, MetaValue)]) -> Vec<(&'static str, MetaValue)> {
        let mut kv = vec![
            ("qwen2.block_count", MetaValue::U32(24)),
            ("qwen2.context_length", MetaValue::U32(32768)),
            ("qwen2.embedding_length", MetaValue::U32(896)),
            ("qwen2.attention.head_count", MetaValue::U32(14)),
        ];
        for (k, v) in extra {
            kv.retain(|(key, _)| key != k);
            kv.push((k, v.clone()));
        }
        kv
    }

    /// Each value is one the vendored llama.cpp aborted `catena run` on (exit 134) when written
    /// into the real default model.
    #[test]
    fn values_llama_cpp_aborts_on_are_named() {
        assert_eq!(problems_of(&qwen(&[]), "qwen2"), Vec::<String>::new());
        let cases: [(&[(&str, MetaValue)], &str); 11] = [
            (
                &[("qwen2.block_count", MetaValue::U32(0))],
                "1 to 512 layers",
            ),
            (
                &[("qwen2.block_count", MetaValue::U32(600))],
                "1 to 512 layers",
            ),
            (
                &[("qwen2.context_length", MetaValue::U32(0))],
                "names no context it was trained for",
            ),
            (
                &[("qwen2.nextn_predict_layers", MetaValue::U32(30))],
                "more than the model's 24 layers",
            ),
            (
                &[("qwen2.rope.scaling.type", MetaValue::String("bogus".into()))],
                "llama.cpp knows none, linear, yarn, longrope",
            ),
            (
                &[("qwen2.expert_count", MetaValue::U32(4))],
                "names 4 experts and qwen2.expert_used_count none in use",
            ),
            (
                &[("qwen2.expert_used_count", MetaValue::U32(2))],
                "is 2, more than the 0 experts",
            ),
            (
                &[("qwen2.expert_count", MetaValue::U32(2000))],
                "more than 1024",
            ),
            (
                &[("qwen2.rope.dimension_count", MetaValue::U32(0))],
                "rope.dimension_count is 0",
            ),
            (
                &[("qwen2.rope.dimension_count", MetaValue::U32(32))],
                "rotary dimensions 32",
            ),
            (
                &[("qwen2.attention.value_length", MetaValue::U32(32))],
                "value size 32",
            ),
        ];
        for (extra, needle) in cases {
            let found = problems_of(&qwen(extra), "qwen2");
            assert!(
                found.iter().any(|p| p.contains(needle)),
                "{extra:?}: {found:?}"
            );
        }
    }

    /// Gemma 3's heads are wider than its embedding over its heads, and its rotary dimensions
    /// are checked against the key size it names. 1000 aborted a decode step in ggml; 0 never
    /// ended one.
    #[test]
    fn rotary_dimensions_fit_a_heads_key_in_any_architecture() {
        let gemma = |rotary: Option<(&'static str, u32)>| {
            let mut kv = vec![
                ("gemma3.block_count", MetaValue::U32(18)),
                ("gemma3.context_length", MetaValue::U32(32768)),
                ("gemma3.embedding_length", MetaValue::U32(640)),
                ("gemma3.attention.head_count", MetaValue::U32(4)),
                ("gemma3.attention.key_length", MetaValue::U32(256)),
                ("gemma3.attention.value_length", MetaValue::U32(256)),
            ];
            kv.extend(rotary.map(|(key, n)| (key, MetaValue::U32(n))));
            problems_of(&kv, "gemma3")
        };
        let all = "gemma3.rope.dimension_count";
        let swa = "gemma3.rope.dimension_count_swa";
        for fine in [None, Some((all, 256)), Some((all, 64)), Some((swa, 128))] {
            assert_eq!(gemma(fine), Vec::<String>::new(), "{fine:?}");
        }
        for refused in [(all, 0), (all, 255), (all, 258), (all, 1000), (swa, 1000)] {
            let found = gemma(Some(refused));
            assert!(
                found.len() == 1
                    && found[0].starts_with(&format!("{} is {}", refused.0, refused.1))
                    && found[0].contains("even number of a head's key dimensions of 256"),
                "{refused:?}: {found:?}"
            );
        }
    }

    #[test]
    fn mixtures_of_experts_as_llama_cpp_reads_them() {
        let moe = |extra: &[(&'static str, MetaValue)]| {
            let mut kv = vec![
                ("qwen2.expert_count", MetaValue::U32(8)),
                ("qwen2.expert_used_count", MetaValue::U32(2)),
            ];
            kv.extend(extra.iter().cloned());
            problems_of(&qwen(&kv), "qwen2")
        };
        assert_eq!(moe(&[]), Vec::<String>::new());
        let per_layer = MetaValue::Array(vec![MetaValue::U32(2), MetaValue::U32(9)]);
        assert_eq!(moe(&[("qwen2.expert_used_count", per_layer)]).len(), 1);
        let grouped = |groups, used| {
            moe(&[
                ("qwen2.expert_group_count", MetaValue::U32(groups)),
                ("qwen2.expert_group_used_count", MetaValue::U32(used)),
            ])
        };
        assert_eq!(grouped(4, 2), Vec::<String>::new());
        for (groups, used) in [(3, 1), (4, 0), (4, 4), (8, 1)] {
            assert_eq!(
                grouped(groups, used).len(),
                1,
                "{groups} groups, {used} used"
            );
        }
    }
}
