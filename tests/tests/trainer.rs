//! The trainer against the real default model (Qwen2.5-Coder-0.5B, Q4_K_M) and llama.cpp:
//! gradients reach every LoRA factor, the training module computes llama.cpp's logits, an
//! exported adapter makes llama.cpp compute the trainer's adapted logits, and tokens and loss
//! masks are the runtime's.

mod common;

use catena_engine::llama::{AdapterOptions, LlamaEngine, LoadOptions};
use catena_engine_api::SessionOptions;
use catena_trainer::data::{self, Conversation};
use catena_trainer::{BaseModel, Device, LoraConfig, Qwen2Lora, Target, export};
use std::sync::OnceLock;

fn engine() -> &'static LlamaEngine {
    static ENGINE: OnceLock<LlamaEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        LlamaEngine::load(&common::default_model(), &LoadOptions::default())
            .expect("the default model")
    })
}

fn base() -> &'static BaseModel {
    static BASE: OnceLock<BaseModel> = OnceLock::new();
    BASE.get_or_init(|| {
        BaseModel::load(&common::default_model(), &Device::Cpu).expect("the base model")
    })
}

fn conversation() -> Conversation {
    Conversation {
        origin: "test".into(),
        system: None,
        user: "Combien font 17 × 23 ? Réponds en \\boxed{}. 计算一下。".into(),
        assistant: concat!(
            "<plan>\n1. Multiply with Python.\n</plan>\n<think>\nПроверю умножение.\n</think>\n",
            "<code>\n```py\nprint(17 * 23)  # 乘法 ✓\n```\n</code>\n<observation>\n[EXECUTED] Code exited with status 0.\n",
            "[STDOUT:BEGIN]\n391\n[STDOUT:END]\n</observation>\n\n<reflection>\n391 is right.\n</reflection>\n",
            "<answer>\\boxed{391}</answer>"
        )
        .into(),
    }
}

fn tokens_of(text: &str) -> Vec<u32> {
    engine()
        .tokenize(text, false)
        .into_iter()
        .map(|t| t as u32)
        .collect()
}

/// llama.cpp's logits at every position, with an optional adapter.
fn llama_logits(tokens: &[u32], adapter: Option<&std::path::Path>) -> Vec<Vec<f32>> {
    let owned;
    let engine = match adapter {
        Some(path) => {
            owned = LlamaEngine::load(
                &common::default_model(),
                &LoadOptions {
                    adapter: Some(AdapterOptions {
                        path: path.to_path_buf(),
                        scale: 1.0,
                    }),
                    ..LoadOptions::default()
                },
            )
            .expect("the model with the adapter");
            &owned
        }
        None => engine(),
    };
    let mut session = engine
        .session(&SessionOptions {
            context_size: Some(256),
            batch_size: 256,
            ..SessionOptions::default()
        })
        .expect("a session");
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    session.logits_at_every_position(&ids).expect("logits")
}

/// How two sets of logits differ.
struct Difference {
    max: f32,
    mean: f32,
    /// The largest logit, for scale.
    largest: f32,
    /// Positions whose most likely next token is the same.
    same_top: usize,
}

fn compare(ours: &catena_trainer::Tensor, theirs: &[Vec<f32>]) -> Difference {
    let ours: Vec<Vec<f32>> = ours.to_vec2().expect("logits");
    let (mut max_diff, mut max_mag, mut same_top) = (0f32, 0f32, 0);
    let (mut sum, mut count) = (0f64, 0usize);
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .fold(
                (0, f32::MIN),
                |best, (i, &x)| if x > best.1 { (i, x) } else { best },
            )
            .0
    };
    for (a, b) in ours.iter().zip(theirs) {
        for (x, y) in a.iter().zip(b) {
            max_diff = max_diff.max((x - y).abs());
            max_mag = max_mag.max(y.abs());
            sum += f64::from((x - y).abs());
            count += 1;
        }
        let (ours_top, their_top) = (argmax(a), argmax(b));
        // Where the two pick different tokens, llama.cpp must rate them within rounding of each
        // other (a near tie), or the top counts as a disagreement.
        let near_tie = (b[ours_top] - b[their_top]).abs() < 2.0 * max_diff.max(0.05);
        same_top += usize::from(ours_top == their_top || near_tie);
    }
    Difference {
        max: max_diff,
        mean: (sum / count.max(1) as f64) as f32,
        largest: max_mag,
        same_top,
    }
}

/// The tolerance reached on this model: mean |Δlogit| under 0.1 and max under 1.5 (logits span
/// about ±30; the max seen was 0.63 to 0.89 from run to run, most likely as thread timing changes the order
/// of candle's sums), and the same most likely token (or two that llama.cpp rates within rounding of
/// each other) at all positions but one.
fn assert_close(d: &Difference, positions: usize) {
    assert!(d.mean < 0.1, "logits differ by {} on average", d.mean);
    assert!(d.max < 1.5, "logits differ by up to {}", d.max);
    assert!(
        d.same_top + 1 >= positions,
        "top tokens agree at only {} of {positions}",
        d.same_top
    );
}

#[test]
fn the_training_module_computes_llama_cpps_logits() {
    let tokens = tokens_of(
        "<think>\nLet me compute 12 * 34 with Python.\n</think>\n<code>\n```py\nprint(12 * 34)\n```\n</code>",
    );
    let model = Qwen2Lora::new(base(), &LoraConfig::default(), 1).expect("the training module");
    let ours = model.logits(&tokens).expect("logits");
    let theirs = llama_logits(&tokens, None);
    let d = compare(&ours, &theirs);
    eprintln!(
        "{} positions: |Δlogit| mean {:.4}, max {:.4} (largest logit {:.2}); same top token at {}",
        tokens.len(),
        d.mean,
        d.max,
        d.largest,
        d.same_top
    );
    // Both round activations to 8 bits for the quantised products, and llama.cpp keeps its KV
    // cache in f16; what is left is rounding, well under the gap between likely tokens.
    assert_close(&d, tokens.len());
}

#[test]
fn every_lora_factor_receives_a_gradient() {
    let config = LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.1,
        ..LoraConfig::default()
    };
    let model = Qwen2Lora::new(base(), &config, 3).expect("the training module");
    let encoded = data::encode(engine(), &conversation()).expect("encoded");
    // Keep it short: the prompt's tail and the trajectory.
    let skip = encoded.tokens.len().saturating_sub(120);
    let (tokens, trained) = (&encoded.tokens[skip..], &encoded.trained[skip..]);
    let first = model
        .sequence_loss(tokens, trained, Some(1), true)
        .expect("a backward pass");
    let grads = first.grads.expect("gradients");
    assert_eq!(grads.len(), model.lora.named().len());
    let norm = |g: &catena_trainer::Tensor| {
        g.sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    // B starts at zero (the adapted model starts as the base), so only B has a gradient now...
    for (name, var) in model.lora.named() {
        let n = norm(&grads[&name]);
        if name.ends_with("lora_b") {
            assert!(n > 0.0, "{name} got no gradient");
        } else {
            assert_eq!(n, 0.0, "{name} moved while B was zero");
        }
        assert_eq!(grads[&name].dims(), var.dims());
    }
    // ...and after one optimizer step, every factor gets one.
    let mut adam = catena_trainer::AdamW::new(Default::default());
    adam.step(&model.lora.named(), &grads, 1e-3)
        .expect("a step");
    let second = model
        .sequence_loss(tokens, trained, Some(2), true)
        .expect("a backward pass");
    let grads = second.grads.expect("gradients");
    let zero: Vec<&String> = grads
        .iter()
        .filter(|(_, g)| norm(g) == 0.0)
        .map(|(n, _)| n)
        .collect();
    assert!(zero.is_empty(), "no gradient for {zero:?}");
    assert!(
        second.nll_sum < first.nll_sum,
        "one step did not lower the loss ({} -> {})",
        first.nll_sum,
        second.nll_sum
    );
}

/// Keeping the products of the forward pass for the recomputation changes no gradient: every
/// factor's gradient with all blocks' products kept, and with some, against recomputing every
/// block whole. Once with all seven layers fused with their factors, once with dropout (the
/// frozen product a node of its own) and layers left without factors.
#[test]
fn kept_products_give_the_gradients_of_a_whole_recomputation() {
    let encoded = data::encode(engine(), &conversation()).expect("encoded");
    let skip = encoded.tokens.len().saturating_sub(90);
    let (tokens, trained) = (&encoded.tokens[skip..], &encoded.trained[skip..]);
    let partial = LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.1,
        targets: vec![Target::Q, Target::V, Target::Down],
        ..LoraConfig::default()
    };
    for config in [LoraConfig::default(), partial] {
        // B starts at zero; a second seed's B would too, so move every factor off its start
        // with one optimizer step first, to give A its gradient.
        let model = Qwen2Lora::new(base(), &config, 7).expect("the training module");
        let first = model
            .sequence_loss(tokens, trained, Some(1), true)
            .expect("a backward pass");
        let mut adam = catena_trainer::AdamW::new(Default::default());
        adam.step(&model.lora.named(), &first.grads.expect("gradients"), 1e-3)
            .expect("a step");
        let grads_with = |bytes: usize, model: Qwen2Lora| {
            let model = model.with_kept_products(bytes);
            let r = model
                .sequence_loss(tokens, trained, Some(2), true)
                .expect("a backward pass");
            (r.nll_sum, r.grads.expect("gradients"), model)
        };
        let (whole_loss, whole, mut model) = grads_with(0, model);
        // One block's products at 89 positions are 4.5 MB: 12 MB keeps the last two, 1 GB all.
        for bytes in [12 << 20, 1 << 30] {
            let (loss, kept, back) = grads_with(bytes, model);
            assert_eq!(loss, whole_loss, "the loss moved with {bytes} bytes kept");
            let max_abs = |t: &catena_trainer::Tensor| -> f32 {
                let max = t.abs().and_then(|a| a.max_all());
                max.and_then(|m| m.to_scalar::<f32>()).expect("a maximum")
            };
            for (name, g) in &whole {
                let scale = max_abs(g);
                let diff = max_abs(&(g - &kept[name]).expect("a difference"));
                assert!(scale > 0.0, "{name} got no gradient");
                assert!(
                    diff <= 1e-5 * scale,
                    "{name}: kept products ({bytes} bytes) move its gradient by {diff} of {scale}"
                );
            }
            model = back;
        }
    }
}

/// Rollouts that begin alike, evaluated as one pack (their shared beginning once, as the RL
/// update does), give the summed loss and the summed gradients of evaluating each alone.
#[test]
fn a_pack_gives_the_summed_loss_and_gradients_of_its_members() {
    let encoded = data::encode(engine(), &conversation()).expect("encoded");
    let skip = encoded.tokens.len().saturating_sub(90);
    let (tokens, trained) = (&encoded.tokens[skip..], &encoded.trained[skip..]);
    // Three members: the conversation, another ending after its first 60 tokens, and one that
    // parts from both after 50 (so the pack's shared prefix is 50 tokens).
    let member = |keep: usize, tail: &str| -> (Vec<u32>, Vec<bool>) {
        let tail = tokens_of(tail);
        let mask = [&trained[..keep], &vec![true; tail.len()][..]].concat();
        ([&tokens[..keep], &tail[..]].concat(), mask)
    };
    let members = [
        (tokens.to_vec(), trained.to_vec()),
        member(60, "<answer>\\boxed{392}</answer>"),
        member(50, "\n</observation>\n<answer>\\boxed{17}</answer>"),
    ];
    let config = LoraConfig {
        rank: 4,
        alpha: 8.0,
        ..LoraConfig::default()
    };
    let model = Qwen2Lora::new(base(), &config, 11).expect("the training module");
    // B starts at zero: one optimizer step first gives A its gradient.
    let first = model
        .sequence_loss(tokens, trained, None, true)
        .expect("a backward pass");
    let mut adam = catena_trainer::AdamW::new(Default::default());
    adam.step(&model.lora.named(), &first.grads.expect("gradients"), 1e-3)
        .expect("a step");
    let sequences: Vec<(&[u32], &[bool])> = members.iter().map(|(t, m)| (&t[..], &m[..])).collect();
    let packed = model.pack_loss(&sequences, true).expect("a packed pass");
    let (mut nll, mut count) = (0.0, 0);
    let mut alone: Option<std::collections::HashMap<String, catena_trainer::Tensor>> = None;
    for (t, m) in &sequences {
        let r = model
            .sequence_loss(t, m, None, true)
            .expect("a backward pass");
        (nll, count) = (nll + r.nll_sum, count + r.tokens);
        let grads = r.grads.expect("gradients");
        alone = Some(match alone {
            None => grads,
            Some(sum) => sum
                .into_iter()
                .map(|(name, g)| {
                    let total = (g + &grads[&name]).expect("a sum");
                    (name, total)
                })
                .collect(),
        });
    }
    assert_eq!(packed.tokens, count);
    assert!(
        (packed.nll_sum - nll).abs() <= 1e-5 * nll,
        "packed loss {} against {nll} alone",
        packed.nll_sum
    );
    let packed_grads = packed.grads.expect("gradients");
    let max_abs = |t: &catena_trainer::Tensor| -> f32 {
        let max = t.abs().and_then(|a| a.max_all());
        max.and_then(|m| m.to_scalar::<f32>()).expect("a maximum")
    };
    let alone = alone.expect("gradients alone");
    assert_eq!(packed_grads.len(), alone.len());
    for (name, g) in &alone {
        let scale = max_abs(g);
        let diff = max_abs(&(g - &packed_grads[name]).expect("a difference"));
        assert!(scale > 0.0, "{name} got no gradient");
        assert!(
            diff <= 1e-4 * scale,
            "{name}: packing moves its gradient by {diff} of {scale}"
        );
    }
}

#[test]
fn an_exported_adapter_makes_llama_cpp_compute_the_trainers_logits() {
    let config = LoraConfig {
        rank: 8,
        alpha: 16.0,
        targets: Target::ALL.to_vec(),
        ..LoraConfig::default()
    };
    let model = Qwen2Lora::new(base(), &config, 5).expect("the training module");
    // A trained-looking adapter: B random and large enough to move the logits visibly.
    for ((_, _), pair) in model.lora.pairs() {
        // Deterministic values (a sine over the indices) so every run tests the same adapter.
        let n = pair.b.elem_count();
        let b = (catena_trainer::Tensor::arange(0f32, n as f32, &Device::Cpu).unwrap() * 0.37)
            .unwrap()
            .sin()
            .unwrap()
            .affine(0.02, 0.0)
            .unwrap()
            .reshape(pair.b.dims())
            .unwrap();
        pair.b.set(&b).unwrap();
    }
    let tokens = tokens_of("<answer>\\boxed{408}</answer> The product of 12 and 34 is 408.");
    let base_model = Qwen2Lora::new(
        base(),
        &LoraConfig {
            rank: 1,
            targets: vec![Target::Q],
            ..LoraConfig::default()
        },
        0,
    )
    .expect("the base module");
    let ours_base = base_model.logits(&tokens).expect("logits");
    let ours = model.logits(&tokens).expect("logits");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let exported = export::export(&model.lora, "qwen2", None, dir.path()).expect("the export");
    let theirs = llama_logits(&tokens, Some(&exported.gguf));
    let d = compare(&ours, &theirs);
    let effect: f32 = (ours - ours_base)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    eprintln!(
        "adapter moves the logits by up to {effect:.3}; llama.cpp with the adapter vs the trainer: |Δ| mean {:.4}, max {:.4} (largest {:.2}), same top token at {}/{}",
        d.mean,
        d.max,
        d.largest,
        d.same_top,
        tokens.len()
    );
    assert!(
        effect > 1.0,
        "the adapter hardly changes the model ({effect})"
    );
    assert_close(&d, tokens.len());
}

#[test]
fn tokens_and_masks_are_the_runtimes() {
    let engine = engine();
    let c = conversation();
    let encoded = data::encode(engine, &c).expect("encoded");
    // The prompt is what `catena run` appends before generating.
    let prompt: Vec<u32> = engine
        .tokenize_parts(
            &engine
                .conversation_prompt(&[catena_engine_api::ChatMessage::new("user", &c.user)])
                .unwrap(),
        )
        .into_iter()
        .map(|t| t as u32)
        .collect();
    assert_eq!(&encoded.tokens[..prompt.len()], &prompt[..]);
    assert!(
        encoded.trained[..prompt.len()].iter().all(|&t| !t),
        "a prompt token is trained"
    );
    // The observation is tokenised on its own, as the runtime appends it, and fully masked.
    let spans = data::observation_spans(&c.assistant).unwrap();
    let observation = &c.assistant[spans[0].clone()];
    assert_eq!(
        observation,
        "\n<observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n391\n[STDOUT:END]\n</observation>\n\n"
    );
    let ids = |mask: bool| -> Vec<i32> {
        encoded.tokens[prompt.len()..]
            .iter()
            .zip(&encoded.trained[prompt.len()..])
            .filter(|(_, t)| **t == mask)
            .map(|(&id, _)| id as i32)
            .collect()
    };
    assert_eq!(engine.detokenize(&ids(false)), observation);
    // Everything else the assistant wrote is trained, and reads back byte for byte, Cyrillic,
    // Chinese and symbols included (the end-of-turn token renders as nothing).
    let mut rest = c.assistant.clone();
    rest.replace_range(spans[0].clone(), "");
    assert_eq!(engine.detokenize(&ids(true)), rest);
    let last = *encoded.tokens.last().unwrap() as i32;
    assert_eq!(
        engine.tokenize("<|im_end|>", true),
        vec![last],
        "the turn ends with <|im_end|>"
    );
    assert!(
        *encoded.trained.last().unwrap(),
        "the end-of-turn token is trained"
    );
    // Tag text is ordinary text: never a special token.
    let tags = engine.tokenize("<observation></observation><code>", false);
    assert!(tags.len() > 3);
    assert_eq!(
        engine.detokenize(&tags),
        "<observation></observation><code>"
    );
}
