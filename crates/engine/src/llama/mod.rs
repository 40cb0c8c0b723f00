//! The llama.cpp engine (through `llama-cpp-2`): a GGUF model checked in Rust first, then loaded
//! with llama.cpp's own reason quoted when it refuses.

mod batch;
mod chat;
// Reads a device's id through the sys crate, which is unsafe.
#[allow(unsafe_code)]
mod device_id;
mod guide;
// Installs llama.cpp's log callback through the sys crate, which is unsafe.
#[allow(unsafe_code)]
mod log;
mod prompt_cache;
// Calls llama.cpp's quantiser through the sys crate, which is unsafe.
#[allow(unsafe_code)]
mod quantize;
// Reads and writes a sequence's KV cells through the context's raw state calls, which are unsafe.
#[allow(unsafe_code)]
mod seq_state;
mod session;
mod streams;

pub use batch::{BatchReport, BatchedSession};
pub use chat::LocalChat;
pub use quantize::quantize;
pub use session::LlamaSession;

use super::{
    ChatFormat, EngineError, GenerateLimits, ModelInfo, PromptPart, SamplingParams, Session,
    SessionOptions, SideChat, StartPrompt, StopMatcher,
};
use catena_engine_api::{ChatMessage, chatml_prompt};
use catena_engine_api::{PromptStart, TaskChat};
use catena_gguf::GgufHeader;
use catena_gguf::inspect::{NOT_GENERATIVE, llama_supports};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Layers to offload to the GPU; `None` offloads all of them when a GPU backend is compiled in.
    pub gpu_layers: Option<u32>,
    /// A LoRA adapter (GGUF, as `catena train` writes it) applied to every session.
    pub adapter: Option<AdapterOptions>,
    /// A folder where the KV cells of prompt prefixes many runs share are kept between
    /// processes (`None`: evaluated in every process). Worth it where one model and adapter serve
    /// many runs; not where the adapter changes at every step (RL).
    pub prompt_cache: Option<PathBuf>,
}

/// A LoRA adapter to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterOptions {
    pub path: PathBuf,
    /// Multiplies the adapter's own `alpha / r` (1 applies it as trained).
    pub scale: f32,
}

/// A loaded adapter. llama.cpp frees adapters together with their model.
struct LoadedAdapter {
    adapter: std::sync::Mutex<llama_cpp_2::model::LlamaLoraAdapter>,
    scale: f32,
}

/// llama.cpp's process-wide initialisation, done once.
fn backend() -> Result<&'static LlamaBackend, EngineError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    log::install();
    BACKEND
        .get_or_init(|| LlamaBackend::init().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| EngineError::Backend(e.clone()))
}

/// A compute device llama.cpp's backends report (the CPU, each GPU).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendDevice {
    /// `CUDA0`, `Vulkan0`, `CPU`.
    pub name: String,
    /// `NVIDIA H100 80GB HBM3`.
    pub description: String,
    /// `CUDA`, `Metal`, `Vulkan`, `CPU`.
    pub backend: String,
    pub memory_total: u64,
    pub memory_free: u64,
    /// A GPU (discrete or integrated) rather than the CPU or an accelerator add-on.
    pub gpu: bool,
    /// The earlier device that is the same GPU through another backend (`CUDA0` for `Vulkan0` in
    /// a `cuda` build): llama.cpp uses that one and skips this, so its memory counts once.
    pub same_gpu_as: Option<String>,
}

/// The devices of this build's llama.cpp backends, with their free memory now.
pub fn backend_devices() -> Result<Vec<BackendDevice>, EngineError> {
    use llama_cpp_2::LlamaBackendDeviceType as Kind;
    backend()?;
    let devices: Vec<(BackendDevice, Option<String>)> =
        llama_cpp_2::list_llama_ggml_backend_devices()
            .into_iter()
            .map(|d| {
                let gpu = matches!(d.device_type, Kind::Gpu | Kind::IntegratedGpu);
                let id = if gpu {
                    device_id::device_id(d.index)
                } else {
                    None
                };
                let device = BackendDevice {
                    gpu,
                    name: d.name,
                    description: d.description,
                    backend: d.backend,
                    memory_total: d.memory_total as u64,
                    memory_free: d.memory_free as u64,
                    same_gpu_as: None,
                };
                (device, id)
            })
            .collect();
    Ok(mark_same_gpus(devices))
}

/// Marks each GPU whose id an earlier GPU already has as the same GPU as that one, as llama.cpp
/// does when it picks the devices a model loads onto.
fn mark_same_gpus(devices: Vec<(BackendDevice, Option<String>)>) -> Vec<BackendDevice> {
    let mut seen: Vec<(String, String)> = Vec::new();
    devices
        .into_iter()
        .map(|(mut device, id)| {
            if let Some(id) = id {
                match seen.iter().find(|(known, _)| *known == id) {
                    Some((_, first)) => device.same_gpu_as = Some(first.clone()),
                    None => seen.push((id, device.name.clone())),
                }
            }
            device
        })
        .collect()
}

/// The one line a build with a GPU backend says when it finds no GPU and runs on the CPU: once a
/// process, so a server's lanes or an evaluation's runs do not repeat it.
fn say_cpu_fallback_once() {
    static SAID: std::sync::Once = std::sync::Once::new();
    let built = gpu_backends_built();
    if built.is_empty() {
        return;
    }
    SAID.call_once(|| {
        tracing::warn!(
            "no GPU found for llama.cpp's {} backend: running on the CPU (`catena doctor` says why)",
            built.join(" and ")
        );
    });
}

/// The GPU backends compiled into this build. Vulkan is in every Linux build (the engine's
/// Cargo.toml); CUDA and Metal are features. A `shared-llama` build has those of the llama.cpp
/// libraries it loaded, whatever its features say.
pub fn gpu_backends_built() -> Vec<&'static str> {
    if cfg!(feature = "shared-llama") {
        return gpu_backends_loaded(
            &std::fs::read_to_string("/proc/self/maps").unwrap_or_default(),
        );
    }
    let mut built = Vec::new();
    if cfg!(feature = "cuda") {
        built.push("cuda");
    }
    if cfg!(feature = "metal") {
        built.push("metal");
    }
    if cfg!(any(feature = "vulkan", target_os = "linux")) {
        built.push("vulkan");
    }
    built
}

/// The GPU backends whose libraries are mapped into this process, from its `/proc/self/maps`: a
/// shared `libggml` needs every backend it was built with, so the loader maps them all at start,
/// whether or not a driver then lets the backend register (a backend without its driver still
/// counts as built, as in a linked build, so the doctor can say which driver to install).
fn gpu_backends_loaded(maps: &str) -> Vec<&'static str> {
    ["cuda", "metal", "vulkan"]
        .into_iter()
        .filter(|backend| maps.contains(&format!("/libggml-{backend}.so")))
        .collect()
}

/// Whether this build can offload layers to a GPU at all.
pub fn supports_gpu_offload() -> Result<bool, EngineError> {
    Ok(backend()?.supports_gpu_offload())
}

/// A loaded GGUF model.
pub struct LlamaEngine {
    model: LlamaModel,
    info: ModelInfo,
    adapter: Option<LoadedAdapter>,
    /// The system prompt the model's template inserts when a conversation has none.
    default_system: Option<String>,
    /// The grammar compiler for constrained decoding, built at the first constrained request
    /// (under the lock: sequences that ask at once wait for one build, about a second for a
    /// vocabulary of 150k tokens, instead of each making its own).
    grammars: Mutex<Option<guide::GrammarFactory>>,
    /// Where shared prompt prefixes are kept between processes ([`LoadOptions::prompt_cache`]).
    prompt_cache: Option<prompt_cache::PromptCache>,
}

impl LlamaEngine {
    /// Checks and loads a model.
    pub fn load(path: &Path, options: &LoadOptions) -> Result<LlamaEngine, EngineError> {
        if !path.is_file() {
            return Err(EngineError::ModelNotFound {
                path: path.to_path_buf(),
            });
        }
        let header = preflight(path)?;
        let backend = backend()?;
        let offload = backend.supports_gpu_offload();
        let block_count = header
            .architecture()
            .and_then(|arch| header.get_u64(&format!("{arch}.block_count")))
            .unwrap_or(0) as u32;
        let gpu_layers = if offload {
            options.gpu_layers.unwrap_or(block_count + 1)
        } else {
            say_cpu_fallback_once();
            0
        };
        let params = LlamaModelParams::default().with_n_gpu_layers(gpu_layers);
        let capture = log::install();
        let mark = capture.mark();
        let mut model = LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
            let said = capture.problems_since(mark);
            EngineError::LoadFailed {
                path: path.to_path_buf(),
                reason: if said.is_empty() {
                    e.to_string()
                } else {
                    said.join("; ")
                },
            }
        })?;
        let adapter = match &options.adapter {
            Some(a) => Some(load_adapter(&mut model, &header, a, capture)?),
            None => None,
        };
        let chat_template = detect_chat_format(&model);
        let info = ModelInfo {
            path: path.to_path_buf(),
            architecture: header.architecture().unwrap_or_default().to_string(),
            name: header.get_str("general.name").map(str::to_string),
            parameters: model.n_params(),
            size_bytes: model.size(),
            context_train: model.n_ctx_train(),
            layers: model.n_layer(),
            gpu_layers: gpu_layers.min(model.n_layer() + 1),
            chat_template,
            adapter: options.adapter.as_ref().map(|a| a.path.clone()),
        };
        tracing::info!(
            model = %path.display(),
            architecture = %info.architecture,
            gpu_layers = info.gpu_layers,
            "model loaded"
        );
        let default_system = model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_str().ok().map(str::to_string))
            .filter(|t| t.contains(catena_protocol::profile::QWEN_SYSTEM))
            .map(|_| catena_protocol::profile::QWEN_SYSTEM.to_string());
        let prompt_cache = options.prompt_cache.as_deref().and_then(|dir| {
            prompt_cache::PromptCache::open(
                dir,
                &prompt_cache::Loaded {
                    model: path,
                    adapter: options
                        .adapter
                        .as_ref()
                        .map(|a| (a.path.as_path(), a.scale)),
                    gpu_layers: info.gpu_layers,
                },
            )
        });
        Ok(LlamaEngine {
            model,
            info,
            adapter,
            default_system,
            grammars: Mutex::new(None),
            prompt_cache,
        })
    }

    /// The model's grammar compiler, built once (it walks the whole vocabulary).
    fn grammar_factory(&self) -> Result<guide::GrammarFactory, EngineError> {
        // A panic while building leaves nothing half-made behind: the slot is still empty.
        let mut slot = self.grammars.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(factory) = slot.as_ref() {
            return Ok(factory.clone());
        }
        let factory = guide::factory(self)?;
        Ok(slot.insert(factory).clone())
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Opens a session with an empty context.
    pub fn session(&self, options: &SessionOptions) -> Result<LlamaSession<'_>, EngineError> {
        LlamaSession::new(self, options)
    }

    /// Answers `chat` in a fresh session of [`SideChat::CONTEXT`] tokens on `threads` (`None`:
    /// the physical cores), greedily. A small model can fall into repeating one line: the third
    /// repeat ends the answer.
    pub fn side_chat(&self, chat: &SideChat, threads: Option<i32>) -> Result<String, EngineError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let prompt = self.chat_prompt(&chat.system, &chat.user)?;
        let ids = self.tokenize_parts(&prompt);
        let context = SideChat::CONTEXT as usize;
        if ids.len() + chat.max_tokens > context {
            return Err(EngineError::ContextOverflow {
                context_size: context,
                needed: ids.len() + chat.max_tokens,
            });
        }
        let options = SessionOptions {
            context_size: Some(SideChat::CONTEXT),
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            threads,
            ..SessionOptions::default()
        };
        let mut session = self.session(&options)?;
        session.start_prompt(&ids)?;
        let looping = std::sync::Arc::new(AtomicBool::new(false));
        let limits = GenerateLimits {
            cancel: Some(looping.clone()),
            ..GenerateLimits::tokens(chat.max_tokens)
        };
        let mut text = String::new();
        session.generate(
            &StopMatcher::new(Vec::<String>::new()),
            limits,
            &mut |piece| {
                text.push_str(piece);
                if piece.contains('\n') && repeats_a_line(&text, 3) {
                    looping.store(true, Ordering::Relaxed);
                }
            },
        )?;
        Ok(text)
    }

    /// The prompt of a single-turn chat, up to the opening of the assistant turn.
    /// An empty `system` is none: the model's default system prompt is used, as for a chat
    /// client that sends no system message.
    pub fn chat_prompt(&self, system: &str, user: &str) -> Result<Vec<PromptPart>, EngineError> {
        if system.is_empty() {
            return self.conversation_prompt(&[ChatMessage::new("user", user)]);
        }
        self.conversation_prompt(&[
            ChatMessage::new("system", system),
            ChatMessage::new("user", user),
        ])
    }

    /// Puts a task's chat into `session` in place of its context, keeping the prefix the two
    /// share: the one way a local session starts a task ([`catena_engine_api::StartChat`]).
    fn start_chat(
        &self,
        session: &mut impl StartPrompt,
        chat: &TaskChat<'_>,
    ) -> Result<PromptStart, EngineError> {
        let (ids, shared) = self.task_prompt(chat)?;
        let cached_tokens = session.start_task_prompt(&ids, shared)?;
        Ok(PromptStart {
            prompt_tokens: ids.len(),
            cached_tokens,
        })
    }

    /// The token ids of a task's prompt, and how many of them every task of its profile begins
    /// with: those of the system message and the user message's shared part (as far as the
    /// tokens of the whole prompt and of that part alone agree).
    pub fn task_prompt(&self, chat: &TaskChat<'_>) -> Result<(Vec<i32>, usize), EngineError> {
        let ids = self.tokenize_parts(&self.chat_prompt(chat.system, chat.user)?);
        let shared = self.shared_with(&ids, chat.system, chat.shared_user())?;
        Ok((ids, shared))
    }

    /// [`Self::task_prompt`] for a conversation: the part every conversation with the same
    /// system message begins with (a multi-agent run's agent, a coding client's instructions).
    pub fn conversation_task_prompt(
        &self,
        messages: &[ChatMessage],
    ) -> Result<(Vec<i32>, usize), EngineError> {
        let ids = self.tokenize_parts(&self.conversation_prompt(messages)?);
        let system = messages
            .first()
            .filter(|m| m.role == "system")
            .map_or("", |m| m.content.as_str());
        let shared = self.shared_with(&ids, system, "")?;
        Ok((ids, shared))
    }

    /// [`Self::task_prompt`] for a prompt the caller rendered itself (a client's request with
    /// tools, by the model's own template): the part it shares with `instructions`, the same
    /// template's prompt of the request's system messages and tools with an empty user message.
    pub fn parts_task_prompt(
        &self,
        parts: &[PromptPart],
        instructions: &[PromptPart],
    ) -> (Vec<i32>, usize) {
        let ids = self.tokenize_parts(parts);
        let shared = agreeing(&ids, &self.tokenize_parts(instructions));
        (ids, shared)
    }

    /// How many tokens of `ids` agree with the prompt of `system` and `user` alone.
    fn shared_with(&self, ids: &[i32], system: &str, user: &str) -> Result<usize, EngineError> {
        let alone = self.tokenize_parts(&self.chat_prompt(system, user)?);
        Ok(agreeing(ids, &alone))
    }

    /// The prompt of a conversation, up to the opening of the next assistant turn. Without a
    /// system message, the model's own default system prompt is used where its template has one
    /// (Qwen2.5's does).
    pub fn conversation_prompt(
        &self,
        messages: &[ChatMessage],
    ) -> Result<Vec<PromptPart>, EngineError> {
        let with_default;
        let messages = match (&self.default_system, messages.first()) {
            (Some(system), Some(first)) if first.role != "system" => {
                with_default = std::iter::once(ChatMessage::new("system", system))
                    .chain(messages.iter().cloned())
                    .collect::<Vec<_>>();
                &with_default[..]
            }
            _ => messages,
        };
        match self.info.chat_template {
            ChatFormat::ChatMl => Ok(chatml_prompt(messages)),
            ChatFormat::Native => {
                let template = self
                    .model
                    .chat_template(None)
                    .map_err(|e| EngineError::Tokenize(format!("chat template: {e}")))?;
                let messages = messages
                    .iter()
                    .map(|m| {
                        LlamaChatMessage::new(m.role.clone(), m.content.clone())
                            .map_err(|e| EngineError::Tokenize(format!("chat message: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let text = self
                    .model
                    .apply_chat_template(&template, &messages, true)
                    .map_err(|e| EngineError::Tokenize(format!("chat template: {e}")))?;
                Ok(vec![PromptPart::special(text)])
            }
            ChatFormat::Plain => {
                let text: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
                Ok(vec![PromptPart::plain(format!(
                    "{}\n\n",
                    text.join("\n\n")
                ))])
            }
        }
    }

    /// Token ids of prompt parts, as [`crate::Session::append`] would evaluate them.
    pub fn tokenize_parts(&self, parts: &[PromptPart]) -> Vec<i32> {
        parts
            .iter()
            .flat_map(|p| self.tokenize(&p.text, p.special))
            .collect()
    }

    /// Token ids of `text`, as llama.cpp tokenises it (`special`: parse control-token text such
    /// as `<|im_start|>`).
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<i32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, special)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The text of token ids, as generation renders them (control tokens render as nothing).
    pub fn detokenize(&self, ids: &[i32]) -> String {
        let vocab = self.model.vocab();
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(vocab.token_to_piece(llama_cpp_2::token::LlamaToken(id), false, None));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.model.n_vocab().max(0) as usize
    }

    /// The token a model wants at the start of a sequence, if it wants one.
    pub fn bos_token(&self) -> Option<i32> {
        let vocab = self.model.vocab();
        vocab.should_add_bos().then(|| vocab.bos().0)
    }

    pub(crate) fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// Applies the engine's adapter (if any) to a new context.
    pub(super) fn apply_adapter(
        &self,
        ctx: &mut llama_cpp_2::context::LlamaContext<'_>,
    ) -> Result<(), EngineError> {
        let Some(loaded) = &self.adapter else {
            return Ok(());
        };
        let mut adapter = loaded
            .adapter
            .lock()
            .map_err(|_| EngineError::Backend("the adapter lock was poisoned".into()))?;
        ctx.lora_adapter_set(&mut adapter, loaded.scale)
            .map_err(|e| EngineError::Backend(format!("applying the LoRA adapter: {e}")))
    }
}

/// How many leading tokens `a` and `b` have in common.
fn agreeing(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Checks an adapter file against the model in Rust, then has llama.cpp load it.
fn load_adapter(
    model: &mut LlamaModel,
    model_header: &GgufHeader,
    options: &AdapterOptions,
    capture: &log::LogCapture,
) -> Result<LoadedAdapter, EngineError> {
    let path = &options.path;
    let bad = |reason: String| EngineError::BadAdapter {
        path: path.clone(),
        reason,
    };
    if !path.is_file() {
        return Err(bad("no such file".into()));
    }
    if !options.scale.is_finite() {
        return Err(bad(format!("the scale {} is not a number", options.scale)));
    }
    let header = GgufHeader::read(path).map_err(|e| bad(e.to_string()))?;
    if header.file_type() != Some("adapter") {
        return Err(bad(
            "it is not a LoRA adapter (general.type is not `adapter`)".into(),
        ));
    }
    let (theirs, ours) = (header.architecture(), model_header.architecture());
    if theirs != ours {
        return Err(bad(format!(
            "it adapts a `{}` model, this model is `{}`",
            theirs.unwrap_or("?"),
            ours.unwrap_or("?")
        )));
    }
    header
        .check_data_present()
        .map_err(|e| bad(e.to_string()))?;
    let mark = capture.mark();
    let adapter = model.lora_adapter_init(path).map_err(|e| {
        let said = capture.problems_since(mark);
        bad(if said.is_empty() {
            e.to_string()
        } else {
            said.join("; ")
        })
    })?;
    tracing::info!(adapter = %path.display(), scale = options.scale, "LoRA adapter loaded");
    Ok(LoadedAdapter {
        adapter: std::sync::Mutex::new(adapter),
        scale: options.scale,
    })
}

fn detect_chat_format(model: &LlamaModel) -> ChatFormat {
    match model.chat_template(None) {
        Ok(template) => match template.to_str() {
            Ok(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl,
            _ => ChatFormat::Native,
        },
        Err(_) => ChatFormat::Plain,
    }
}

/// What Rust can tell about the file before llama.cpp reads it.
fn preflight(path: &Path) -> Result<GgufHeader, EngineError> {
    let bad = |reason: String| EngineError::BadModel {
        path: PathBuf::from(path),
        reason,
    };
    let header = GgufHeader::read(path).map_err(|e| bad(e.to_string()))?;
    if header.file_type() == Some("adapter") {
        return Err(bad(
            "it is a LoRA adapter, not a model (pass it with --adapter)".into(),
        ));
    }
    let Some(arch) = header.architecture() else {
        return Err(bad("it has no general.architecture".into()));
    };
    if !llama_supports(arch) {
        return Err(bad(format!(
            "its architecture `{arch}` is not one the bundled llama.cpp knows (a newer Catena may run it)"
        )));
    }
    if NOT_GENERATIVE.contains(&arch) {
        return Err(bad(format!(
            "its architecture `{arch}` does not generate text (an encoder or a projector)"
        )));
    }
    // Values llama.cpp would stop the whole process on, refused here with their names.
    let problems = catena_gguf::hyperparameters::problems(&header, arch);
    if !problems.is_empty() {
        return Err(bad(problems.join("; ")));
    }
    header
        .check_data_present()
        .map_err(|e| bad(e.to_string()))?;
    Ok(header)
}

/// Whether a complete non-empty line of `text` occurs `times` times.
fn repeats_a_line(text: &str, times: usize) -> bool {
    let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
    let mut counts = std::collections::HashMap::new();
    complete
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .any(|line| {
            let count = counts.entry(line).or_insert(0);
            *count += 1;
            *count >= times
        })
}

#[cfg(test)]
mod side_chat_tests {
    #[test]
    fn a_line_seen_three_times_is_a_loop() {
        assert!(super::repeats_a_line("a\nb\na\n\na\n", 3));
        assert!(
            !super::repeats_a_line("a\nb\na\na", 3),
            "the last line is not complete yet"
        );
    }
}

#[cfg(test)]
mod device_tests {
    use super::{BackendDevice, mark_same_gpus};

    fn device(name: &str, gpu: bool) -> BackendDevice {
        BackendDevice {
            name: name.into(),
            description: String::new(),
            backend: String::new(),
            memory_total: 8 << 30,
            memory_free: 8 << 30,
            gpu,
            same_gpu_as: None,
        }
    }

    #[test]
    fn a_gpu_reached_by_two_backends_counts_once() {
        let marked = mark_same_gpus(vec![
            (device("CUDA0", true), Some("0000:01:00.0".into())),
            (device("Vulkan0", true), Some("0000:01:00.0".into())),
            (device("Vulkan1", true), Some("0000:02:00.0".into())),
            (device("Vulkan2", true), None),
            (device("CPU", false), None),
        ]);
        let same: Vec<Option<&str>> = marked.iter().map(|d| d.same_gpu_as.as_deref()).collect();
        assert_eq!(same, [None, Some("CUDA0"), None, None, None]);
    }

    #[test]
    fn a_shared_build_s_backends_are_the_libraries_it_mapped() {
        let maps = "\
7f00-7f10 r-xp 00000000 08:01 11 /opt/llama/libggml-cuda.so.0.26.0
7f10-7f20 r-xp 00000000 08:01 12 /opt/llama/libggml-cpu.so.0.26.0
7f20-7f30 r-xp 00000000 08:01 13 /opt/llama/libggml.so.0.26.0
";
        assert_eq!(super::gpu_backends_loaded(maps), ["cuda"]);
        assert!(super::gpu_backends_loaded("7f20-7f30 r-xp /x/libggml.so.0").is_empty());
    }
}
