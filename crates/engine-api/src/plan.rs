//! Sizing a model to a machine: how many layers go to the GPU, how long a context fits, and how
//! the KV cache is stored, chosen so weights, cache and compute buffers fit with a margin. The
//! user can fix any of the three; the plan then says whether that still fits. Every choice comes
//! with its reason, because "why is my GPU idle" deserves an answer.
//!
//! The estimate, per device: weights of the layers placed there, plus their KV cache for the whole
//! context, plus llama.cpp's compute buffer (dominated by one batch of logits), plus a margin.

use crate::KvCacheType;
use catena_gguf::inspect::{Inspection, human_bytes};
use serde::Serialize;

/// The protocol's context budget (PROTOCOL.md §2): no plan asks for more by default.
pub const PROTOCOL_CONTEXT: u32 = 32_768;
/// Plans shrink the context no further than this; a chain needs room for several tool calls.
pub const MIN_CONTEXT: u32 = 4_096;
/// The prompt batch the engine evaluates at once.
const BATCH: u64 = 512;
/// Scratch every context needs besides the logits.
const COMPUTE_BASE: u64 = 192 << 20;

/// KV caches a context of `sequences` sequences decoded together holds: a stream for each and,
/// with more than one, a spare stream the batch scheduler moves sequences through
/// (docs/ARCHITECTURE.md, "Many sequences in one context"). Each is as large as one sequence's.
pub fn batched_kv_caches(sequences: u32) -> u32 {
    if sequences > 1 {
        sequences.saturating_add(1)
    } else {
        1
    }
}

/// The sizes of a model that matter for placement (from [`Inspection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelSize {
    pub layers: u32,
    pub bytes_per_layer: u64,
    /// Embeddings, output head, norms.
    pub bytes_outside_layers: u64,
    pub kv_bytes_per_token_f16: u64,
    pub context_train: u32,
    pub vocab_size: u64,
}

impl ModelSize {
    /// The sizes of an inspected model, when its header gives them.
    pub fn from_inspection(report: &Inspection) -> Option<ModelSize> {
        let shape = &report.shape;
        Some(ModelSize {
            layers: u32::try_from(shape.layers?).ok()?,
            bytes_per_layer: report.bytes_per_layer,
            bytes_outside_layers: report.bytes_outside_layers,
            kv_bytes_per_token_f16: shape.kv_bytes_per_token_f16?,
            context_train: shape
                .context_length
                .and_then(|c| u32::try_from(c).ok())
                .unwrap_or(PROTOCOL_CONTEXT),
            vocab_size: shape.vocab_size.unwrap_or(152_064),
        })
    }

    fn kv_bytes(&self, layers: u32, context: u32, kv: KvCacheType) -> u64 {
        let per_layer_token = self.kv_bytes_per_token_f16 / u64::from(self.layers.max(1));
        per_layer_token * u64::from(layers) * u64::from(context) * kv.bytes_per_element_x64() / 128
    }

    fn compute_bytes(&self) -> u64 {
        COMPUTE_BASE + BATCH * self.vocab_size * 4
    }
}

/// What the machine offers (from the hardware probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capacity {
    /// Memory available to a new process now.
    pub ram_available: u64,
    /// Free memory of the GPUs llama.cpp can use (summed: llama.cpp splits layers across them);
    /// `None` when this build cannot offload or there is no GPU.
    pub gpu_free: Option<u64>,
}

/// What the user fixed, and how many contexts will be open at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Overrides {
    pub context: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub kv_cache: Option<KvCacheType>,
    /// KV caches alive at once (`catena serve --sessions`, or the slots of `--parallel`); 0
    /// counts as 1.
    pub kv_caches: u32,
}

/// The choice, with its reasons.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Plan {
    /// llama.cpp's `n_gpu_layers`: blocks on the GPU, plus one for the output head when all fit.
    pub gpu_layers: u32,
    pub context: u32,
    pub kv_cache: KvCacheType,
    /// Estimated bytes on the GPU and in RAM.
    pub gpu_bytes: u64,
    pub ram_bytes: u64,
    pub reasons: Vec<String>,
    /// Why it may not run well or at all (empty when it fits).
    pub problems: Vec<String>,
}

/// Where the bytes go for one placement.
#[derive(Debug, Clone, Copy)]
struct Placement {
    gpu: u64,
    ram: u64,
}

fn place(
    model: &ModelSize,
    gpu_layers: u32,
    context: u32,
    kv: KvCacheType,
    kv_caches: u32,
) -> Placement {
    let on_gpu = gpu_layers.min(model.layers);
    let on_cpu = model.layers - on_gpu;
    let head_on_gpu = gpu_layers > model.layers;
    let caches = u64::from(kv_caches.max(1));
    let mut gpu =
        u64::from(on_gpu) * model.bytes_per_layer + caches * model.kv_bytes(on_gpu, context, kv);
    let mut ram =
        u64::from(on_cpu) * model.bytes_per_layer + caches * model.kv_bytes(on_cpu, context, kv);
    if head_on_gpu {
        gpu += model.bytes_outside_layers + model.compute_bytes();
    } else {
        ram += model.bytes_outside_layers + model.compute_bytes();
        if on_gpu > 0 {
            gpu += COMPUTE_BASE;
        }
    }
    Placement { gpu, ram }
}

/// Memory a plan may use: all but a margin for the system, the app and fragmentation.
fn usable(bytes: u64, reserve: u64) -> u64 {
    bytes.saturating_sub(reserve).saturating_sub(bytes / 10)
}

const RAM_RESERVE: u64 = 1 << 30;
const GPU_RESERVE: u64 = 256 << 20;

/// Plans the placement of `model` on a machine with `capacity`.
pub fn plan(model: &ModelSize, capacity: Capacity, overrides: Overrides) -> Plan {
    let mut reasons = Vec::new();
    let mut problems = Vec::new();
    let limits = Limits {
        model,
        overrides,
        ram: usable(capacity.ram_available, RAM_RESERVE),
        gpu: capacity.gpu_free.map(|free| usable(free, GPU_RESERVE)),
        all: model.layers + 1,
    };
    let wanted = wanted_context(model, overrides, &mut reasons, &mut problems);
    let (context, gpu_layers, kv_cache) = limits.search(wanted, &mut reasons);
    let placement = place(model, gpu_layers, context, kv_cache, overrides.kv_caches);
    limits.explain(capacity, gpu_layers, kv_cache, placement, &mut reasons);
    limits.check_memory(capacity, gpu_layers, placement, &mut problems);
    Plan {
        gpu_layers,
        context,
        kv_cache,
        gpu_bytes: placement.gpu,
        ram_bytes: placement.ram,
        reasons,
        problems,
    }
}

/// The context asked for, or the smaller of the trained one and the protocol's; a problem when
/// it is longer than the model was trained on.
fn wanted_context(
    model: &ModelSize,
    overrides: Overrides,
    reasons: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> u32 {
    let context = match overrides.context {
        Some(c) => {
            reasons.push(format!("context {c} tokens, as asked"));
            c
        }
        None => {
            let c = model.context_train.min(PROTOCOL_CONTEXT);
            reasons.push(format!(
                "context {c} tokens: the smaller of the model's trained {} and the protocol's {}",
                model.context_train, PROTOCOL_CONTEXT
            ));
            c
        }
    };
    if context > model.context_train {
        problems.push(format!(
            "a context of {context} is longer than the {} tokens the model was trained on; quality drops past it",
            model.context_train
        ));
    }
    context
}

/// What a plan must fit in: the usable RAM and GPU memory, with the user's overrides.
struct Limits<'a> {
    model: &'a ModelSize,
    overrides: Overrides,
    ram: u64,
    gpu: Option<u64>,
    /// The layers and the output head: every "layer" that can go on the GPU.
    all: u32,
}

impl Limits<'_> {
    /// The cache types to try, best first.
    fn kv_choices(&self) -> Vec<KvCacheType> {
        match self.overrides.kv_cache {
            Some(kv) => vec![kv],
            None => vec![KvCacheType::F16, KvCacheType::Q8_0],
        }
    }

    /// The GPU layers asked for, or the most that fit in GPU memory (none without a GPU).
    fn layer_choice(&self, context: u32, kv: KvCacheType) -> Option<u32> {
        if let Some(n) = self.overrides.gpu_layers {
            return Some(n.min(self.all));
        }
        let Some(gpu) = self.gpu else {
            return Some(0);
        };
        (0..=self.all)
            .rev()
            .find(|&n| place(self.model, n, context, kv, self.overrides.kv_caches).gpu <= gpu)
    }

    fn fits(&self, n: u32, context: u32, kv: KvCacheType) -> bool {
        let p = place(self.model, n, context, kv, self.overrides.kv_caches);
        p.ram <= self.ram
            && self
                .gpu
                .is_none_or(|g| p.gpu <= g || self.overrides.gpu_layers.is_some())
    }

    /// Layers first (speed), then a smaller cache type, then a shorter context: the context,
    /// the GPU layers and the cache type chosen, each shortening of the context in `reasons`.
    fn search(&self, wanted: u32, reasons: &mut Vec<String>) -> (u32, u32, KvCacheType) {
        let kv_choices = self.kv_choices();
        // With a GPU, the exact cache is kept only if it still lets every layer onto the GPU.
        let last_kv = *kv_choices.last().unwrap_or(&KvCacheType::F16);
        let acceptable = |n: u32, kv: KvCacheType| {
            self.gpu.is_none()
                || self.overrides.gpu_layers.is_some()
                || n == self.all
                || kv == last_kv
        };
        let mut context = wanted;
        loop {
            for &kv in &kv_choices {
                if let Some(n) = self.layer_choice(context, kv)
                    && self.fits(n, context, kv)
                    && acceptable(n, kv)
                {
                    return (context, n, kv);
                }
            }
            if self.overrides.context.is_some() || context <= MIN_CONTEXT {
                break;
            }
            let shorter = (context / 2).max(MIN_CONTEXT);
            reasons.push(format!(
                "context shortened from {context} to {shorter} tokens so the KV cache fits"
            ));
            context = shorter;
        }
        (
            context,
            self.layer_choice(context, last_kv).unwrap_or(0),
            last_kv,
        )
    }

    /// Why this cache type and this many GPU layers.
    fn explain(
        &self,
        capacity: Capacity,
        gpu_layers: u32,
        kv_cache: KvCacheType,
        placement: Placement,
        reasons: &mut Vec<String>,
    ) {
        let model = self.model;
        if self.overrides.kv_cache.is_some() {
            reasons.push(format!("KV cache {}, as asked", kv_cache.name()));
        } else if kv_cache == KvCacheType::Q8_0 {
            reasons.push(
                "KV cache q8_0: with f16, less would fit (q8_0 halves the cache for a small loss)"
                    .into(),
            );
        } else {
            reasons.push("KV cache f16 (exact)".into());
        }
        match (capacity.gpu_free, self.overrides.gpu_layers) {
            (_, Some(n)) => reasons.push(format!("{n} GPU layers, as asked")),
            (None, None) => {
                reasons.push("no GPU this build can use: everything runs on the CPU".into())
            }
            (Some(free), None) if gpu_layers == self.all => reasons.push(format!(
                "all {} layers and the output head on the GPU: they need {}, {} is free",
                model.layers,
                human_bytes(placement.gpu),
                human_bytes(free)
            )),
            (Some(free), None) => reasons.push(format!(
                "{gpu_layers} of {} layers on the GPU: that is what fits in {} free with a margin; the rest run on the CPU",
                model.layers,
                human_bytes(free)
            )),
        }
    }

    /// What will not fit: RAM, or GPU memory for the layers asked for.
    fn check_memory(
        &self,
        capacity: Capacity,
        gpu_layers: u32,
        placement: Placement,
        problems: &mut Vec<String>,
    ) {
        if placement.ram > self.ram {
            problems.push(format!(
                "not enough memory: this needs about {} of RAM, {} is available (with a margin); choose a smaller model or quantisation",
                human_bytes(placement.ram),
                human_bytes(capacity.ram_available)
            ));
        }
        if let Some(g) = self.gpu
            && placement.gpu > g
        {
            problems.push(format!(
                "{gpu_layers} GPU layers need about {} of GPU memory, {} is free: expect an out-of-memory error",
                human_bytes(placement.gpu),
                human_bytes(capacity.gpu_free.unwrap_or(0))
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn cpu_only(ram_gib: u64) -> Capacity {
        Capacity {
            ram_available: ram_gib * GIB,
            gpu_free: None,
        }
    }

    fn with_gpu(ram_gib: u64, gpu_gib: u64) -> Capacity {
        Capacity {
            ram_available: ram_gib * GIB,
            gpu_free: Some(gpu_gib * GIB),
        }
    }

    /// Roughly Qwen2.5-7B at Q4_K_M: 28 layers, 4.4 GiB, 56 KiB of KV per token.
    fn qwen7b() -> ModelSize {
        ModelSize {
            layers: 28,
            bytes_per_layer: 140 << 20,
            bytes_outside_layers: 600 << 20,
            kv_bytes_per_token_f16: 57_344,
            context_train: 32_768,
            vocab_size: 152_064,
        }
    }

    #[test]
    fn a_big_gpu_takes_every_layer_with_an_exact_cache() {
        let p = plan(&qwen7b(), with_gpu(16, 78), Overrides::default());
        assert_eq!(p.gpu_layers, 29);
        assert_eq!(p.kv_cache, KvCacheType::F16);
        assert_eq!(p.context, 32_768);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
    }

    #[test]
    fn a_small_gpu_takes_what_fits_and_says_so() {
        let p = plan(&qwen7b(), with_gpu(16, 3), Overrides::default());
        assert!(p.gpu_layers > 0 && p.gpu_layers < 29, "{p:?}");
        assert!(p.gpu_bytes <= usable(3 * GIB, GPU_RESERVE));
        assert!(p.reasons.iter().any(|r| r.contains("of 28 layers")));
        assert!(p.problems.is_empty(), "{:?}", p.problems);
    }

    #[test]
    fn without_a_gpu_the_cache_shrinks_before_the_context() {
        // 4.4 GiB of weights, 0.5 GiB of compute buffer and 1.75 GiB of f16 cache at 32k do not
        // fit in the 6.2 GiB that 8 GiB leaves after the margin; with q8_0 (0.93 GiB) they do.
        let p = plan(&qwen7b(), cpu_only(8), Overrides::default());
        assert_eq!(p.gpu_layers, 0);
        assert_eq!(p.kv_cache, KvCacheType::Q8_0, "{p:?}");
        assert_eq!(p.context, 32_768);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
    }

    #[test]
    fn a_tight_machine_shortens_the_context_then_reports_what_cannot_fit() {
        // 5.3 GiB usable: a q8_0 cache fits for 8k tokens, not for 16k.
        let p = plan(&qwen7b(), cpu_only(7), Overrides::default());
        assert_eq!((p.context, p.kv_cache), (8192, KvCacheType::Q8_0), "{p:?}");
        assert!(p.reasons.iter().any(|r| r.contains("shortened")));
        assert!(p.problems.is_empty(), "{:?}", p.problems);

        let p = plan(&qwen7b(), cpu_only(2), Overrides::default());
        assert!(p.problems.iter().any(|m| m.contains("not enough memory")));
    }

    #[test]
    fn overrides_are_kept_and_checked() {
        let p = plan(
            &qwen7b(),
            with_gpu(16, 2),
            Overrides {
                context: Some(8192),
                gpu_layers: Some(99),
                kv_cache: Some(KvCacheType::F16),
                kv_caches: 1,
            },
        );
        assert_eq!(
            (p.gpu_layers, p.context, p.kv_cache),
            (29, 8192, KvCacheType::F16)
        );
        assert!(p.problems.iter().any(|m| m.contains("out-of-memory")));
    }

    #[test]
    fn every_kept_session_counts() {
        let one = plan(
            &qwen7b(),
            cpu_only(16),
            Overrides {
                context: Some(8192),
                ..Overrides::default()
            },
        );
        let four = plan(
            &qwen7b(),
            cpu_only(16),
            Overrides {
                context: Some(8192),
                kv_caches: 4,
                ..Overrides::default()
            },
        );
        // 8192 tokens x 56 KiB = 448 MiB of f16 cache per session.
        assert_eq!(four.ram_bytes - one.ram_bytes, 3 * 8192 * 57_344);
    }
}
