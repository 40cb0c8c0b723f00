//! The Qwen2 training module: the base model's frozen, quantised weights plus LoRA factors.
//!
//! Memory is what limits training on a desktop, so the graph never spans the whole model:
//! - per-block checkpointing: the forward pass keeps only each block's input; the backward pass
//!   recomputes one block at a time with its input as a leaf and feeds it the gradient of its
//!   output through the surrogate `sum(out ⊙ grad_out)`, whose gradient is exactly that;
//! - kept products: within a memory budget, the forward pass also keeps the values of the last
//!   blocks' product nodes (the seven projections, each with its LoRA path), so recomputing
//!   those blocks redoes only the cheap ops between the products; the gradients are the same;
//! - chunked vocabulary log-probs: the `(tokens, vocab)` logits exist one chunk of trained
//!   positions at a time, and only for positions that carry loss.

use crate::base::{BaseModel, Qwen2Config};
use crate::fused;
use crate::lora::{LoraConfig, LoraParams, Target, dropout_mask};
use crate::ops;
use crate::pack::Pack;
use crate::qlinear::QLinear;
use crate::{Result, TrainError};
use candle_core::quantized::QTensor;
use candle_core::{D, DType, Device, Tensor, Var};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Positions of the vocabulary projection computed at once. Each chunk reads the whole
/// projection (545 MB in f32 for a 152k vocabulary) forward and again backward, so short chunks
/// are bound by memory: on the 2-core VM 128 rows cost 6.3 ms a row against 14.8 at 32
/// (`scripts/bench/matmul.sh`). 128 rows of that vocabulary are 78 MB per logits-sized tensor.
const HEAD_CHUNK: usize = 128;

/// The most memory spent on dequantised copies of the layers' weights on the CPU (small models
/// keep them all; a 7B model dequantises per use instead).
const DENSE_CACHE_BYTES: usize = 6 << 30;

/// The most memory a training step spends keeping product nodes' values from its forward pass
/// for the recomputation (see [`Products`]). The default model at 610 tokens needs 31 MB a
/// block, 742 MB for all 24; a longer sequence or a larger model keeps as many of its last
/// blocks as fit and recomputes the others whole; a pass of many rows gets less (see
/// [`FULL_BUDGET_ROWS`]).
const KEPT_PRODUCTS_BYTES: usize = 1 << 30;

/// The rows of a pass that gets the whole kept-products budget; a pass of more rows (a pack)
/// gets the budget scaled down by its rows, because its own working set (block inputs, the
/// recomputed block and its gradients) already grows with them. One sample of up to 672 tokens
/// still keeps all of the default model's 24 blocks. On the 2-core VM, an SFT step of
/// 4,096 tokens in packs of up to 2,048 rows peaked at 4,554 MiB against 5,148 with the whole
/// budget in every pass, at 0.97 of its speed; the RL update's pack of five rollouts at 3.5 GB
/// against 4.2, also at 0.97 (docs/BENCHMARKS.md, "What a pack keeps").
const FULL_BUDGET_ROWS: usize = 512;

struct Block {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    linears: HashMap<Target, QLinear>,
    q_bias: Option<Tensor>,
    k_bias: Option<Tensor>,
    v_bias: Option<Tensor>,
}

/// A Qwen2 model ready to train LoRA factors.
pub struct Qwen2Lora {
    pub config: Qwen2Config,
    embed: Embedding,
    head: QLinear,
    final_norm: Tensor,
    blocks: Vec<Block>,
    pub lora: LoraParams,
    device: Device,
    kept_products_bytes: usize,
}

/// Where a token's input vector comes from.
enum Embedding {
    /// The quantised table, row by row.
    Table(Arc<QTensor>),
    /// The rows of the output projection's dense copy: a tied table on the CPU, whose
    /// dequantised rows are the same values, held once instead of twice.
    TiedHead,
}

/// How one forward pass treats the LoRA factors.
#[derive(Clone, Copy)]
struct Pass {
    /// Build the graph through the factors (the recomputation in backward) or not.
    track: bool,
    /// Dropout key for this micro-batch, `None` when evaluating.
    dropout_key: Option<u64>,
}

/// What a block does with its layers' product nodes (the frozen product of each projection,
/// with its LoRA path when fused). Those products are about nine tenths of a block's arithmetic,
/// and within one step their inputs and factors do not change between the forward pass and the
/// block's recomputation in backward, so a value kept from the first is the second's exactly.
enum Products<'a> {
    /// Multiply (evaluation, and blocks outside the budget).
    Compute,
    /// Multiply, and keep each product's value here (a training step's forward pass).
    Keep(&'a mut HashMap<Target, Tensor>),
    /// Take each product's value from here instead of multiplying; the node still
    /// differentiates as the product (the recomputation in backward).
    Reuse(&'a mut HashMap<Target, Tensor>),
}

impl Products<'_> {
    /// The value kept for `target`, when reusing.
    fn take(&mut self, target: Target) -> Option<Tensor> {
        match self {
            Products::Reuse(kept) => kept.remove(&target),
            _ => None,
        }
    }

    fn keep(&mut self, target: Target, value: &Tensor) {
        if let Products::Keep(kept) = self {
            kept.insert(target, value.detach());
        }
    }
}

/// The loss of one sequence and, when asked, the gradients of every factor.
pub struct SequenceLoss {
    /// Sum of the negative log-likelihoods of the trained tokens.
    pub nll_sum: f64,
    /// Number of trained tokens.
    pub tokens: usize,
    pub grads: Option<HashMap<String, Tensor>>,
}

/// How [`Qwen2Lora::pack_objective`] runs.
#[derive(Debug, Clone, Copy)]
pub struct ObjectivePass {
    /// Dropout key for a training pass; `None` turns dropout off.
    pub dropout_key: Option<u64>,
    /// Compute the factors' gradients of the objective.
    pub with_grads: bool,
    /// Also compute the entropy of the next-token distribution at each trained position.
    pub entropy: bool,
}

/// What [`Qwen2Lora::pack_objective`] gives for each member of a pack.
pub struct TokenObjective {
    /// `sum_t w_t · log p_t`.
    pub value: f64,
    /// `log p_t` of each trained token under the current factors, in order.
    pub logprobs: Vec<f32>,
    /// The entropy (nats) at each trained position, when asked.
    pub entropies: Vec<f32>,
}

/// The result of [`Qwen2Lora::pack_objective`]: each member's part, and the
/// gradients of the objective summed over the members.
pub struct PackObjective {
    pub members: Vec<TokenObjective>,
    pub grads: Option<HashMap<String, Tensor>>,
}

/// What one chunk of trained rows gave in the head.
struct HeadOut {
    /// `log p` of each row's label.
    values: Vec<f32>,
    /// The entropy at each row, when asked.
    entropies: Vec<f32>,
    /// The weight of each row.
    weights: Vec<f32>,
    /// The chunk's gradient w.r.t. the last block's output, for a pass with gradients.
    grad: Option<Tensor>,
}

impl Qwen2Lora {
    /// Builds the training module over `base`, with fresh factors from `seed`.
    pub fn new(base: &BaseModel, lora: &LoraConfig, seed: u64) -> Result<Qwen2Lora> {
        let config = base.config.clone();
        let device = base.device().clone();
        let mut weights = Vec::with_capacity(config.layers);
        for l in 0..config.layers {
            let mut layer = Vec::with_capacity(Target::ALL.len());
            for t in Target::ALL {
                layer.push((t, base.qtensor(&format!("blk.{l}.{}.weight", t.gguf()))?));
            }
            weights.push(layer);
        }
        // Kept copies serve both passes, so every layer's weight counts.
        let dense_bytes: usize = weights
            .iter()
            .flatten()
            .map(|(_, w)| w.shape().elem_count() * 4)
            .sum();
        let keep_dense = device.is_cpu() && dense_bytes <= DENSE_CACHE_BYTES;
        let mut blocks = Vec::with_capacity(config.layers);
        for (l, layer) in weights.into_iter().enumerate() {
            let linears: HashMap<Target, QLinear> = layer
                .into_iter()
                .map(|(t, w)| (t, QLinear::new(w, keep_dense)))
                .collect();
            let bias = |name: &str| -> Result<Option<Tensor>> {
                let name = format!("blk.{l}.{name}.bias");
                if base.has(&name) {
                    Ok(Some(base.dense(&name)?))
                } else {
                    Ok(None)
                }
            };
            blocks.push(Block {
                attn_norm: base.dense(&format!("blk.{l}.attn_norm.weight"))?,
                ffn_norm: base.dense(&format!("blk.{l}.ffn_norm.weight"))?,
                q_bias: bias("attn_q")?,
                k_bias: bias("attn_k")?,
                v_bias: bias("attn_v")?,
                linears,
            });
        }
        let table = base.qtensor("token_embd.weight")?;
        // Tied embeddings (the 0.5B to 3B Qwen2.5 models) reuse the input table as the output.
        let (head_weight, embed) = if base.has("output.weight") {
            (base.qtensor("output.weight")?, Embedding::Table(table))
        } else if device.is_cpu() {
            (table, Embedding::TiedHead)
        } else {
            (table.clone(), Embedding::Table(table))
        };
        let shape_of = |l: usize, t: Target| blocks[l].linears[&t].dims();
        let lora = LoraParams::init(lora, config.layers, shape_of, seed, &device)?;
        Ok(Qwen2Lora {
            head: QLinear::new(head_weight, true),
            final_norm: base.dense("output_norm.weight")?,
            embed,
            blocks,
            lora,
            config,
            device,
            kept_products_bytes: KEPT_PRODUCTS_BYTES,
        })
    }

    /// Sets the memory a pass of up to 512 rows may spend keeping products for its
    /// recomputation (default 1 GiB; a larger pass gets it scaled down by its rows; 0
    /// recomputes every block whole). The gradients do not depend on it.
    pub fn with_kept_products(mut self, bytes: usize) -> Qwen2Lora {
        self.kept_products_bytes = bytes;
        self
    }

    fn embed(&self, tokens: &[u32]) -> Result<Tensor> {
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(TrainError::Config(format!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.config.vocab
            )));
        }
        let ids = Tensor::new(tokens, &self.device)?;
        Ok(match &self.embed {
            Embedding::Table(table) => table.embedding(&ids)?,
            Embedding::TiedHead => self.head.dense_rows(&ids)?,
        })
    }

    /// One adapted linear layer: the frozen product plus the LoRA path.
    fn linear(
        &self,
        block: usize,
        target: Target,
        x: &Tensor,
        pass: Pass,
        products: &mut Products<'_>,
    ) -> Result<Tensor> {
        let layer = &self.blocks[block].linears[&target];
        let known = products.take(target);
        let frozen = |x: &Tensor| match &known {
            Some(known) => layer.forward_known(x, known),
            None => layer.forward(x),
        };
        let Some(pair) = self.lora.get(block, target) else {
            let y = frozen(x)?;
            products.keep(target, &y);
            return Ok(y);
        };
        let (a, b) = if pass.track {
            (pair.a.as_tensor().clone(), pair.b.as_tensor().clone())
        } else {
            (pair.a.as_tensor().detach(), pair.b.as_tensor().detach())
        };
        let dropout = pass.dropout_key.is_some() && self.lora.config.dropout > 0.0;
        if fused::applies(x) && !dropout {
            let scale = self.lora.config.scale();
            let y = layer.forward_adapted(x, &a, &b, scale, known.as_ref())?;
            products.keep(target, &y);
            return Ok(y);
        }
        let input = match pass.dropout_key {
            Some(key) if self.lora.config.dropout > 0.0 => {
                let mask = dropout_mask(
                    self.lora.config.dropout,
                    [key, block as u64, target as u64, 0],
                    x.dims2()?,
                    &self.device,
                )?;
                (x * mask)?
            }
            _ => x.clone(),
        };
        let delta = input.matmul(&a.t()?)?.matmul(&b.t()?)?;
        let base = frozen(x)?;
        products.keep(target, &base);
        Ok((base + (delta * f64::from(self.lora.config.scale()))?)?)
    }

    /// One transformer block on `x (len, hidden)`.
    fn block(
        &self,
        l: usize,
        x: &Tensor,
        rope: &Rope,
        pass: Pass,
        products: &mut Products<'_>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let blk = &self.blocks[l];
        let len = x.dim(0)?;
        let h = ops::rms_norm(x, &blk.attn_norm, c.rms_eps)?;
        let add_bias = |t: Tensor, bias: &Option<Tensor>| -> Result<Tensor> {
            Ok(match bias {
                Some(b) => t.broadcast_add(b)?,
                None => t,
            })
        };
        let q = add_bias(self.linear(l, Target::Q, &h, pass, products)?, &blk.q_bias)?;
        let k = add_bias(self.linear(l, Target::K, &h, pass, products)?, &blk.k_bias)?;
        let v = add_bias(self.linear(l, Target::V, &h, pass, products)?, &blk.v_bias)?;
        let q = ops::rope_heads(&q, c.heads, &rope.cos, &rope.sin)?;
        let k = ops::rope_heads(&k, c.kv_heads, &rope.cos, &rope.sin)?;
        let v = ops::split_heads(&v, c.kv_heads)?;
        let attn = self.attention(&q, &k, &v, rope)?;
        let attn = attn.transpose(0, 1)?.reshape((len, c.heads * c.head_dim))?;
        let x = (x + self.linear(l, Target::O, &attn, pass, products)?)?;
        let h = ops::rms_norm(&x, &blk.ffn_norm, c.rms_eps)?;
        let gate = self.linear(l, Target::Gate, &h, pass, products)?;
        let up = self.linear(l, Target::Up, &h, pass, products)?;
        let down = self.linear(l, Target::Down, &ops::swiglu(&gate, &up)?, pass, products)?;
        Ok((x + down)?)
    }

    /// Attention over a pack's rows (pack.rs): the prefix's rows causally among themselves,
    /// each continuation's over the prefix's keys and its own, causally.
    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, rope: &Rope) -> Result<Tensor> {
        let scale = 1.0 / (self.config.head_dim as f64).sqrt();
        let mask = |i: usize| rope.masks.as_ref().and_then(|m| m.get(i));
        let prefix = rope.prefix;
        if rope.continuations.iter().all(Range::is_empty) {
            return Ok(ops::causal_attention(q, k, v, scale, mask(0))?);
        }
        let (shared_k, shared_v) = (k.narrow(1, 0, prefix)?, v.narrow(1, 0, prefix)?);
        let mut parts = Vec::with_capacity(rope.continuations.len() + 1);
        if prefix > 0 {
            let shared_q = q.narrow(1, 0, prefix)?;
            parts.push(ops::causal_attention(
                &shared_q,
                &shared_k,
                &shared_v,
                scale,
                mask(0),
            )?);
        }
        for (i, rows) in rope.continuations.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let own = |t: &Tensor| t.narrow(1, rows.start, rows.len());
            let with_prefix = |shared: &Tensor, t: &Tensor| -> Result<Tensor> {
                Ok(if prefix == 0 {
                    own(t)?
                } else {
                    Tensor::cat(&[shared, &own(t)?], 1)?
                })
            };
            let (keys, values) = (with_prefix(&shared_k, k)?, with_prefix(&shared_v, v)?);
            parts.push(ops::causal_attention(
                &own(q)?,
                &keys,
                &values,
                scale,
                mask(i + 1),
            )?);
        }
        Ok(Tensor::cat(&parts, 1)?)
    }

    /// The rotary tables of rows at `positions`, laid out as a pack's: `prefix` rows, then the
    /// `continuations`; with the attention masks where the attention is not the fused kernel's.
    fn rope(
        &self,
        positions: &[u32],
        prefix: usize,
        continuations: &[Range<usize>],
    ) -> Result<Rope> {
        let (cos, sin) = ops::rope_tables(
            positions,
            self.config.head_dim,
            self.config.rope_theta,
            &self.device,
        )?;
        let masks = if fused::applies(&cos) {
            None
        } else {
            let mut masks = vec![ops::causal_mask(prefix, prefix, &self.device)?];
            for rows in continuations {
                let (own, keys) = (rows.len(), prefix + rows.len());
                masks.push(ops::causal_mask(own, keys, &self.device)?);
            }
            Some(masks)
        };
        Ok(Rope {
            cos,
            sin,
            prefix,
            continuations: continuations.to_vec(),
            masks,
        })
    }

    /// The logits at every position of `tokens`, `(len, vocab)`, without a graph (tests and
    /// comparisons with llama.cpp).
    pub fn logits(&self, tokens: &[u32]) -> Result<Tensor> {
        let pass = Pass {
            track: false,
            dropout_key: None,
        };
        let positions: Vec<u32> = (0..tokens.len() as u32).collect();
        let rope = self.rope(&positions, tokens.len(), &[])?;
        let mut x = self.embed(tokens)?;
        for l in 0..self.config.layers {
            x = self.block(l, &x, &rope, pass, &mut Products::Compute)?;
        }
        let h = ops::rms_norm(&x, &self.final_norm, self.config.rms_eps)?;
        Ok(self.head.forward(&h)?)
    }

    /// The loss of one sequence: `trained[i]` says whether token `i` carries loss (it is
    /// predicted from the tokens before it). With `dropout_key` set this is a training pass and
    /// the factors' gradients (of the summed, not averaged, loss) come back too.
    pub fn sequence_loss(
        &self,
        tokens: &[u32],
        trained: &[bool],
        dropout_key: Option<u64>,
        with_grads: bool,
    ) -> Result<SequenceLoss> {
        self.nll(&Pack::new(&[(tokens, trained)])?, dropout_key, with_grads)
    }

    /// The summed loss of sequences that begin alike, their shared beginning evaluated once
    /// (pack.rs), as [`Qwen2Lora::sequence_loss`] without dropout would give it summed over them.
    pub fn pack_loss(
        &self,
        sequences: &[(&[u32], &[bool])],
        with_grads: bool,
    ) -> Result<SequenceLoss> {
        self.nll(&Pack::new(sequences)?, None, with_grads)
    }

    /// The summed negative log-likelihood of a pack's trained tokens (the objective with weight
    /// `-1` everywhere), and its gradients when asked.
    fn nll(&self, pack: &Pack, dropout_key: Option<u64>, with_grads: bool) -> Result<SequenceLoss> {
        let pass = ObjectivePass {
            dropout_key,
            with_grads,
            entropy: false,
        };
        let r = self.pack_objective(pack, pass, &mut |_, lp| vec![-1.0; lp.len()])?;
        Ok(SequenceLoss {
            nll_sum: r.members.iter().map(|m| m.value).sum(),
            tokens: r.members.iter().map(|m| m.logprobs.len()).sum(),
            grads: r.grads,
        })
    }

    /// The log-probability of each trained token under the current factors, without a graph
    /// (comparisons with the rollout engine).
    pub fn token_logprobs(&self, tokens: &[u32], trained: &[bool]) -> Result<Vec<f32>> {
        let mut all = self.pack_logprobs(&[(tokens, trained)])?;
        Ok(all.pop().unwrap_or_default())
    }

    /// The log-probability of each trained token of each sequence, without a graph, the
    /// sequences' shared beginning evaluated once (RL's pre-update log-probabilities).
    pub(crate) fn pack_logprobs(&self, sequences: &[(&[u32], &[bool])]) -> Result<Vec<Vec<f32>>> {
        let pass = ObjectivePass {
            dropout_key: None,
            with_grads: false,
            entropy: false,
        };
        let r = self.pack_objective(&Pack::new(sequences)?, pass, &mut |_, lp| {
            vec![0.0; lp.len()]
        })?;
        Ok(r.members.into_iter().map(|m| m.logprobs).collect())
    }

    /// The general objective `sum_t w_t · log p(token_t)` over the trained tokens of every
    /// member of `pack` at once, the gradients those of the objective summed over the members.
    /// `weights` is called with a member and a run of its trained tokens' log-probabilities
    /// under the current factors (each member's in order). The weights are constants of the
    /// gradient: SFT passes `-1` everywhere (the summed NLL); the RL update passes the
    /// derivative of its clipped, importance-weighted loss with respect to each token's
    /// log-probability, which needs the log-probability first.
    pub(crate) fn pack_objective(
        &self,
        pack: &Pack,
        pass: ObjectivePass,
        weights: &mut dyn FnMut(usize, &[f32]) -> Vec<f32>,
    ) -> Result<PackObjective> {
        let mut result = PackObjective {
            members: pack
                .trained
                .iter()
                .map(|rows| TokenObjective {
                    value: 0.0,
                    logprobs: Vec::with_capacity(rows.len()),
                    entropies: Vec::new(),
                })
                .collect(),
            grads: None,
        };
        // (member, row, label) of every trained token, member after member.
        let trained: Vec<(usize, u32, u32)> = pack
            .trained
            .iter()
            .enumerate()
            .flat_map(|(m, rows)| rows.iter().map(move |&(row, label)| (m, row, label)))
            .collect();
        if trained.is_empty() {
            result.grads = pass.with_grads.then(HashMap::new);
            return Ok(result);
        }
        let forward = Pass {
            track: false,
            dropout_key: pass.dropout_key,
        };
        let rope = self.rope(&pack.positions(), pack.prefix, &pack.continuations)?;
        let mut kept = self.kept_products(pack.inputs.len(), pass.with_grads);
        let (inputs_of, x) =
            self.forward_keeping_block_inputs(&pack.inputs, &rope, forward, &mut kept)?;
        // The objective, a chunk of trained rows at a time (a chunk may span members); its
        // gradient w.r.t. the last block's output is gathered chunk by chunk.
        let last = Var::from_tensor(&x)?;
        let normed = ops::rms_norm(last.as_tensor(), &self.final_norm, self.config.rms_eps)?;
        let mut grad_out: Option<Tensor> = None;
        for chunk in trained.chunks(HEAD_CHUNK) {
            let positions: Vec<u32> = chunk.iter().map(|&(_, row, _)| row).collect();
            let labels: Vec<u32> = chunk.iter().map(|&(_, _, label)| label).collect();
            let runs: Vec<&[(usize, u32, u32)]> = chunk.chunk_by(|a, b| a.0 == b.0).collect();
            let head = HeadChunk {
                normed: &normed,
                last: &last,
                positions: &positions,
                labels: &labels,
            };
            let out = self.head_chunk(head, pass, &mut |values| {
                let mut w = Vec::with_capacity(values.len());
                for run in &runs {
                    let at = w.len().min(values.len());
                    let end = (at + run.len()).min(values.len());
                    w.extend(weights(run[0].0, &values[at..end]));
                }
                w
            })?;
            let mut at = 0;
            for run in &runs {
                let rows = at..at + run.len();
                let member = &mut result.members[run[0].0];
                member.value += out.weights[rows.clone()]
                    .iter()
                    .zip(&out.values[rows.clone()])
                    .map(|(w, v)| f64::from(*w) * f64::from(*v))
                    .sum::<f64>();
                member.logprobs.extend_from_slice(&out.values[rows.clone()]);
                if pass.entropy {
                    member
                        .entropies
                        .extend_from_slice(&out.entropies[rows.clone()]);
                }
                at = rows.end;
            }
            if let Some(g) = out.grad {
                grad_out = Some(match grad_out {
                    Some(acc) => (acc + g)?,
                    None => g,
                });
            }
        }
        if !pass.with_grads {
            return Ok(result);
        }
        let grad_out = grad_out.ok_or_else(|| {
            TrainError::Stopped("the loss did not reach the last block (internal error)".into())
        })?;
        let track = Pass {
            track: true,
            ..forward
        };
        result.grads =
            Some(self.backward_through_blocks(&inputs_of, &rope, track, grad_out, &mut kept)?);
        Ok(result)
    }

    /// Where a training step keeps product values (see [`Products`]): a map for each of the
    /// last blocks whose products fit the budget (scaled down past [`FULL_BUDGET_ROWS`]) at
    /// `len` positions, none for the others, and none at all for a pass without gradients or
    /// off the CPU (the kept values are copied back by CPU kernels).
    fn kept_products(&self, len: usize, with_grads: bool) -> Vec<Option<HashMap<Target, Tensor>>> {
        let layers = self.config.layers;
        if !with_grads || !self.device.is_cpu() {
            return (0..layers).map(|_| None).collect();
        }
        let row_bytes: usize = self.blocks.first().map_or(0, |blk| {
            blk.linears.values().map(|lin| lin.dims().0).sum::<usize>() * 4
        });
        let first_kept =
            layers.saturating_sub(blocks_to_keep(self.kept_products_bytes, row_bytes, len));
        (0..layers)
            .map(|l| (l >= first_kept).then(HashMap::new))
            .collect()
    }

    /// The forward pass through every block, keeping each block's input (what the backward
    /// pass recomputes a block from) and, where `kept` has room, its products; and the last
    /// block's output.
    fn forward_keeping_block_inputs(
        &self,
        inputs: &[u32],
        rope: &Rope,
        pass: Pass,
        kept: &mut [Option<HashMap<Target, Tensor>>],
    ) -> Result<(Vec<Tensor>, Tensor)> {
        let mut inputs_of = Vec::with_capacity(self.config.layers);
        let mut x = self.embed(inputs)?;
        for l in 0..self.config.layers {
            let mut products = match kept.get_mut(l).and_then(Option::as_mut) {
                Some(map) => Products::Keep(map),
                None => Products::Compute,
            };
            let next = self.block(l, &x, rope, pass, &mut products)?.detach();
            inputs_of.push(x);
            x = next;
        }
        Ok((inputs_of, x))
    }

    /// One chunk of trained rows through the head: their log-probabilities (and entropies),
    /// their weights from `weights`, and, for a pass with gradients, this chunk's gradient
    /// w.r.t. the last block's output.
    fn head_chunk(
        &self,
        chunk: HeadChunk<'_>,
        pass: ObjectivePass,
        weights: &mut dyn FnMut(&[f32]) -> Vec<f32>,
    ) -> Result<HeadOut> {
        let idx = Tensor::new(chunk.positions, &self.device)?;
        let rows = if pass.with_grads {
            chunk.normed.index_select(&idx, 0)?
        } else {
            chunk.normed.detach().index_select(&idx, 0)?
        };
        let logits = self.head.forward(&rows)?;
        let picked = ops::label_logprobs(&logits, chunk.labels)?;
        let values = picked.detach().to_dtype(DType::F32)?.to_vec1::<f32>()?;
        let mut entropies = Vec::new();
        if pass.entropy {
            let logp = ops::log_softmax_last(&logits.detach())?;
            let p_logp = (logp.exp()? * &logp)?;
            let h = p_logp.sum(D::Minus1)?.neg()?.to_dtype(DType::F32)?;
            entropies = h.to_vec1::<f32>()?;
        }
        let w = weights(&values);
        if w.len() != values.len() {
            return Err(TrainError::Config(format!(
                "{} weights for {} tokens (internal error)",
                w.len(),
                values.len()
            )));
        }
        let grad = if pass.with_grads {
            let wt = Tensor::new(w.as_slice(), &self.device)?.to_dtype(picked.dtype())?;
            let objective = (picked * wt)?.sum_all()?;
            let grads = objective.backward()?;
            grads.get(chunk.last.as_tensor()).cloned()
        } else {
            None
        };
        Ok(HeadOut {
            values,
            entropies,
            weights: w,
            grad,
        })
    }

    /// The backward pass, one recomputed block at a time from its kept input (and its kept
    /// products, freed once used): every factor's gradient (zeros for a factor the loss did not
    /// reach), by name.
    fn backward_through_blocks(
        &self,
        inputs_of: &[Tensor],
        rope: &Rope,
        track: Pass,
        mut grad_out: Tensor,
        kept: &mut [Option<HashMap<Target, Tensor>>],
    ) -> Result<HashMap<String, Tensor>> {
        let mut grads = HashMap::new();
        for l in (0..self.config.layers).rev() {
            let input = Var::from_tensor(&inputs_of[l])?;
            let mut slot = kept.get_mut(l).and_then(Option::take);
            let mut products = match slot.as_mut() {
                Some(map) => Products::Reuse(map),
                None => Products::Compute,
            };
            // Reuse moves each kept value into its node, so the map is empty after the block.
            let out = self.block(l, input.as_tensor(), rope, track, &mut products)?;
            let surrogate = (out * &grad_out)?.sum_all()?;
            let store = surrogate.backward()?;
            for &target in &self.lora.config.targets {
                let Some(pair) = self.lora.get(l, target) else {
                    continue;
                };
                for (factor, var) in [("lora_a", &pair.a), ("lora_b", &pair.b)] {
                    let g = match store.get(var.as_tensor()) {
                        Some(g) => g.clone(),
                        None => var.as_tensor().zeros_like()?,
                    };
                    grads.insert(crate::lora::tensor_name(l, target, factor), g);
                }
            }
            if l > 0 {
                grad_out = store.get(input.as_tensor()).cloned().ok_or_else(|| {
                    TrainError::Stopped(format!("block {l} passed no gradient (internal error)"))
                })?;
            }
        }
        Ok(grads)
    }
}

/// How many blocks' products a pass of `rows` keeps within `budget` bytes, a block's products
/// taking `row_bytes` a row: the whole budget up to [`FULL_BUDGET_ROWS`] rows, scaled down by
/// the rows past it.
fn blocks_to_keep(budget: usize, row_bytes: usize, rows: usize) -> usize {
    let budget = if rows > FULL_BUDGET_ROWS {
        budget / rows * FULL_BUDGET_ROWS
    } else {
        budget
    };
    budget / row_bytes.saturating_mul(rows).max(1)
}

/// One chunk of the head's work in [`Qwen2Lora::pack_objective`].
struct HeadChunk<'a> {
    /// The final norm of the last block's output, every position.
    normed: &'a Tensor,
    /// The last block's output, as the variable its gradient is taken w.r.t.
    last: &'a Var,
    /// Rows whose next token is trained, and those tokens.
    positions: &'a [u32],
    labels: &'a [u32],
}

/// Where the rows of a forward pass sit: their rotary tables, and the pack's layout that the
/// attention follows (pack.rs).
struct Rope {
    cos: Tensor,
    sin: Tensor,
    /// Rows every member shares.
    prefix: usize,
    /// Each member's own rows after them.
    continuations: Vec<Range<usize>>,
    /// The additive masks of the prefix's attention and each continuation's, for the
    /// elementary attention (off the CPU); `None` where the fused kernel needs none.
    masks: Option<Vec<Tensor>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_past_the_full_budget_rows_keeps_fewer_blocks() {
        // The default model's seven projections give 12,672 values a row and block, in f32.
        let row_bytes = 12_672 * 4;
        // Up to 512 rows, the whole budget: 41 blocks' worth (all 24 kept).
        assert_eq!(blocks_to_keep(KEPT_PRODUCTS_BYTES, row_bytes, 512), 41);
        // Past it, the budget shrinks with the rows: one sample of 672 tokens keeps all 24
        // blocks, one of 713 keeps 21, and a pack of 2,048 rows 2 (10 with the whole budget).
        assert_eq!(blocks_to_keep(KEPT_PRODUCTS_BYTES, row_bytes, 672), 24);
        assert_eq!(blocks_to_keep(KEPT_PRODUCTS_BYTES, row_bytes, 713), 21);
        assert_eq!(blocks_to_keep(KEPT_PRODUCTS_BYTES, row_bytes, 2048), 2);
        assert_eq!(blocks_to_keep(0, row_bytes, 610), 0);
        assert_eq!(
            blocks_to_keep(KEPT_PRODUCTS_BYTES, row_bytes, 0),
            KEPT_PRODUCTS_BYTES
        );
    }
}
