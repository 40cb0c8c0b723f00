//! Hugging Face tensor names to the names llama.cpp looks up (`blk.N.attn_q.weight`, ...), and
//! the one layout change the Llama architecture needs.

use crate::config::{Architecture, ModelConfig};

/// What becomes of a checkpoint tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// Written under this GGUF name.
    Tensor(String),
    /// Not part of the model llama.cpp runs (RoPE inverse frequencies llama.cpp recomputes).
    Skip,
}

/// The GGUF name of `hf`, or `None` for a tensor this architecture does not have.
pub fn gguf_name(architecture: Architecture, hf: &str) -> Option<Mapped> {
    if hf.ends_with(".rotary_emb.inv_freq") {
        return Some(Mapped::Skip);
    }
    let whole = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(name) = whole {
        return Some(Mapped::Tensor(name.to_string()));
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (block, part) = rest.split_once('.')?;
    let block = catena_protocol::names::layer_number(block)?;
    let (module, suffix) = part.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let target = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "self_attn.q_norm" if architecture == Architecture::Qwen3 => "attn_q_norm",
        "self_attn.k_norm" if architecture == Architecture::Qwen3 => "attn_k_norm",
        _ => return None,
    };
    Some(Mapped::Tensor(format!("blk.{block}.{target}.{suffix}")))
}

/// The shape llama.cpp's loader expects of the tensor `gguf` (row-major, as the checkpoint
/// stores it) in a model of `config` with `vocab` tokens; `None` for a tensor this architecture's
/// loader does not read (llama.cpp refuses a file holding a tensor it does not read, as it
/// refuses one whose tensor has another shape).
pub fn expected_shape(config: &ModelConfig, gguf: &str, vocab: u64) -> Option<Vec<u64>> {
    let hidden = config.embedding;
    let query = config.head_count * config.head_dim;
    let key_value = config.head_count_kv * config.head_dim;
    let ff = config.feed_forward;
    let llama = config.architecture == Architecture::Llama;
    let qwen3 = config.architecture == Architecture::Qwen3;
    match gguf {
        "token_embd.weight" | "output.weight" => return Some(vec![vocab, hidden]),
        "output_norm.weight" => return Some(vec![hidden]),
        _ => {}
    }
    let (_, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let shape = match part {
        "attn_norm.weight" | "ffn_norm.weight" => vec![hidden],
        "attn_q.weight" => vec![query, hidden],
        "attn_q.bias" => vec![query],
        "attn_k.weight" | "attn_v.weight" => vec![key_value, hidden],
        "attn_k.bias" | "attn_v.bias" => vec![key_value],
        "attn_output.weight" => vec![hidden, query],
        "ffn_gate.weight" | "ffn_up.weight" => vec![ff, hidden],
        "ffn_down.weight" => vec![hidden, ff],
        "attn_output.bias" | "ffn_down.bias" if llama => vec![hidden],
        "ffn_gate.bias" | "ffn_up.bias" if llama => vec![ff],
        "attn_q_norm.weight" | "attn_k_norm.weight" if qwen3 => vec![config.head_dim],
        _ => return None,
    };
    Some(shape)
}

/// The tensors every layer must have for llama.cpp to load the model (`blk.N.` left out).
pub fn required_in_block(architecture: Architecture) -> Vec<&'static str> {
    let mut names = vec![
        "attn_norm.weight",
        "attn_q.weight",
        "attn_k.weight",
        "attn_v.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    ];
    if architecture == Architecture::Qwen3 {
        names.extend(["attn_q_norm.weight", "attn_k_norm.weight"]);
    }
    names
}

/// For Llama, the heads the rows of `hf` must be regrouped into (see [`unpermute_rows`]): Hugging
/// Face's Llama stores each head's query and key rows with the two halves of the rotary pairs
/// apart, llama.cpp wants them interleaved. `None` for every other tensor and architecture.
pub fn rope_heads(
    architecture: Architecture,
    hf: &str,
    head_count: u64,
    head_count_kv: Option<u64>,
) -> Option<u64> {
    if architecture != Architecture::Llama {
        return None;
    }
    if hf.ends_with("self_attn.q_proj.weight") || hf.ends_with("self_attn.q_proj.bias") {
        Some(head_count)
    } else if hf.ends_with("self_attn.k_proj.weight") || hf.ends_with("self_attn.k_proj.bias") {
        Some(head_count_kv.unwrap_or(head_count))
    } else {
        None
    }
}

/// Reorders the rows of a `[rows, row_len]` tensor for llama.cpp's rotary layout: viewed as
/// `[heads, 2, rows / heads / 2, row_len]`, the two middle axes are swapped. `None` when the rows
/// do not split into `heads` pairs.
pub fn unpermute_rows(data: &[u8], rows: u64, row_bytes: usize, heads: u64) -> Option<Vec<u8>> {
    if heads == 0 || !rows.is_multiple_of(heads * 2) || data.len() as u64 != rows * row_bytes as u64
    {
        return None;
    }
    let half = (rows / heads / 2) as usize;
    let heads = heads as usize;
    let mut out = Vec::with_capacity(data.len());
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                // Source row (h, j, i) of the [heads, 2, half] view.
                let row = (h * 2 + j) * half + i;
                out.extend_from_slice(&data[row * row_bytes..(row + 1) * row_bytes]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen2_names_are_llama_cpps() {
        let name = |hf: &str| match gguf_name(Architecture::Qwen2, hf) {
            Some(Mapped::Tensor(n)) => n,
            other => panic!("{hf}: {other:?}"),
        };
        assert_eq!(name("model.embed_tokens.weight"), "token_embd.weight");
        assert_eq!(
            name("model.layers.7.self_attn.q_proj.bias"),
            "blk.7.attn_q.bias"
        );
        assert_eq!(
            name("model.layers.23.mlp.down_proj.weight"),
            "blk.23.ffn_down.weight"
        );
        assert_eq!(
            name("model.layers.0.post_attention_layernorm.weight"),
            "blk.0.ffn_norm.weight"
        );
        assert_eq!(name("lm_head.weight"), "output.weight");
        assert_eq!(
            gguf_name(
                Architecture::Qwen2,
                "model.layers.0.self_attn.rotary_emb.inv_freq"
            ),
            Some(Mapped::Skip)
        );
        // Qwen3's per-head norms exist only in Qwen3; unknown tensors are not guessed.
        assert_eq!(
            gguf_name(
                Architecture::Qwen2,
                "model.layers.0.self_attn.q_norm.weight"
            ),
            None
        );
        assert_eq!(
            gguf_name(
                Architecture::Qwen3,
                "model.layers.0.self_attn.q_norm.weight"
            ),
            Some(Mapped::Tensor("blk.0.attn_q_norm.weight".into()))
        );
        assert_eq!(
            gguf_name(Architecture::Qwen2, "model.layers.x.mlp.up_proj.weight"),
            None
        );
        assert_eq!(
            gguf_name(Architecture::Qwen2, "vision_tower.patch.weight"),
            None
        );
    }

    #[test]
    fn llama_rows_are_interleaved_per_head() {
        // 2 heads of 4 rows each (2 pairs), one byte per row: rows 0..8.
        let data: Vec<u8> = (0..8).collect();
        let out = unpermute_rows(&data, 8, 1, 2).unwrap();
        // Head 0 = rows 0,1 | 2,3 (the two halves) becomes 0,2,1,3.
        assert_eq!(out, vec![0, 2, 1, 3, 4, 6, 5, 7]);
        assert_eq!(unpermute_rows(&data, 8, 1, 3), None);
        assert_eq!(
            rope_heads(
                Architecture::Llama,
                "model.layers.0.self_attn.k_proj.weight",
                32,
                Some(8)
            ),
            Some(8)
        );
        assert_eq!(
            rope_heads(
                Architecture::Qwen2,
                "model.layers.0.self_attn.k_proj.weight",
                32,
                Some(8)
            ),
            None
        );
    }
}
