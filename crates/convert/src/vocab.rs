//! The tokenizer, carried from `tokenizer.json` and `tokenizer_config.json` into the GGUF's
//! `tokenizer.*` keys the way llama.cpp reads them: a byte-level BPE vocabulary ("gpt2"), every
//! id up to the model's vocabulary size (ids the tokenizer lacks become unused `[PADn]` tokens),
//! token types (normal, control for special tokens, user-defined for the other added tokens),
//! the merges, the pre-tokenizer llama.cpp must split text with, the special token ids, whether a
//! BOS is added, and the chat template.

use crate::config::{MAX_VOCAB, ModelConfig, Problem};
use crate::error::ConvertError;
use crate::gguf_writer::Value;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// llama.cpp's names for the pre-tokenizers whose splitting regex it implements, by the regex a
/// Hugging Face `tokenizer.json` gives. A tokenizer whose regex is not here would be split
/// differently by llama.cpp, so it is refused rather than converted wrong.
const PRE_TOKENIZERS: &[(&str, &str)] = &[
    (
        // Qwen2, Qwen2.5, Qwen3 (every AFM).
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        "qwen2",
    ),
    (
        // Llama 3.
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        "llama-bpe",
    ),
];

/// The Qwen2 splitting regex, for other modules' tests.
#[cfg(test)]
pub(crate) fn tests_regex() -> &'static str {
    PRE_TOKENIZERS[0].0
}

/// A checkpoint's vocabulary as llama.cpp reads it.
pub struct Vocabulary {
    /// The number of tokens: the rows the embedding and output tensors must have.
    pub tokens: u64,
    /// The `tokenizer.*` metadata, in the order it is written.
    pub metadata: Vec<(String, Value)>,
}

/// The vocabulary of the checkpoint in `dir`.
pub fn read_vocab(dir: &Path, config: &ModelConfig) -> Result<Vocabulary, ConvertError> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(ConvertError::Unsupported(format!(
            "{} has no tokenizer.json (a SentencePiece-only tokenizer is not supported)",
            dir.display()
        )));
    }
    let tokenizer = std::fs::read(&path).map_err(ConvertError::io(&path))?;
    let config_path = dir.join("tokenizer_config.json");
    let tokenizer_config = if config_path.is_file() {
        Some(std::fs::read(&config_path).map_err(ConvertError::io(&config_path))?)
    } else {
        None
    };
    let template_file = dir.join("chat_template.jinja");
    let template_alt = if template_file.is_file() {
        Some(std::fs::read_to_string(&template_file).map_err(ConvertError::io(&template_file))?)
    } else {
        None
    };
    vocab_from_json(
        &tokenizer,
        tokenizer_config
            .as_deref()
            .map(|t| (t, config_path.as_path())),
        template_alt,
        config,
        &path,
    )
}

/// The vocabulary from the bytes of `tokenizer.json` (named `path` in errors) and, when there
/// is one, of `tokenizer_config.json` with its path. Nothing is allocated beyond the input and
/// the vocabulary's size, which `config` has bounded.
pub fn vocab_from_json(
    tokenizer: &[u8],
    tokenizer_config: Option<(&[u8], &Path)>,
    template_alt: Option<String>,
    config: &ModelConfig,
    path: &Path,
) -> Result<Vocabulary, ConvertError> {
    let tokenizer = json_object(tokenizer, path)?;
    let tokenizer_config = match tokenizer_config {
        Some((bytes, config_path)) => json_object(bytes, config_path)?,
        None => Map::new(),
    };
    vocab(&tokenizer, &tokenizer_config, template_alt, config).map_err(|p| p.at(path))
}

fn json_object(text: &[u8], path: &Path) -> Result<Map<String, Json>, ConvertError> {
    match serde_json::from_slice(text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(ConvertError::bad(path, "not a JSON object")),
        Err(e) => Err(ConvertError::bad(path, format!("not valid JSON: {e}"))),
    }
}

/// An added token of `tokenizer.json`.
struct Added {
    content: String,
    special: bool,
}

/// Whether llama.cpp should treat an added token as a control token even when the tokenizer does
/// not mark it special (the `<|...|>` markers).
fn looks_special(token: &str) -> bool {
    (token.starts_with("<|") && token.ends_with("|>"))
        || (token.starts_with("<｜") && token.ends_with("｜>"))
        || (token.starts_with("<unused") && token.ends_with('>'))
        || matches!(token, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
}

fn vocab(
    tokenizer: &Map<String, Json>,
    tokenizer_config: &Map<String, Json>,
    template_alt: Option<String>,
    config: &ModelConfig,
) -> Result<Vocabulary, Problem> {
    let model = bpe_model(tokenizer)?;
    let mut by_id = model_tokens(model)?;
    let added = added_tokens(tokenizer, &mut by_id)?;
    let vocab_size = vocab_size(&by_id, config)?;
    let (tokens, types) = tokens_and_types(vocab_size, &by_id, &added);
    check_unique(&tokens)?;
    let merges = merges(model)?;
    let pre = pre_tokenizer(tokenizer)?;

    let mut out: Vec<(String, Value)> = vec![
        ("tokenizer.ggml.model".into(), Value::Str("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::Str(pre.into())),
        ("tokenizer.ggml.tokens".into(), Value::StrArray(tokens)),
        ("tokenizer.ggml.token_type".into(), Value::I32Array(types)),
        ("tokenizer.ggml.merges".into(), Value::StrArray(merges)),
    ];
    let (special, add) = special_tokens(tokenizer, tokenizer_config, &added, config, vocab_size)?;
    // llama.cpp adds a BOS, EOS or separator it was told to add but given no id for as its own
    // default (id 11 for this vocabulary type; it aborts when the vocabulary is smaller).
    if let Some((typ, _)) = add.iter().find(|(typ, added)| {
        *added && matches!(*typ, "bos" | "eos" | "sep") && !special.iter().any(|(t, _)| t == typ)
    }) {
        return Err(Problem::Bad(format!(
            "the tokenizer adds a {typ} token to every prompt but names none in its vocabulary"
        )));
    }
    for (typ, id) in special {
        out.push((format!("tokenizer.ggml.{}", id_key(typ)), Value::U32(id)));
    }
    // llama.cpp reads whether to add BOS, EOS and SEP; the others have no key.
    for (typ, value) in add {
        if matches!(typ, "bos" | "eos" | "sep") {
            out.push((
                format!("tokenizer.ggml.add_{typ}_token"),
                Value::Bool(value),
            ));
        }
    }
    if let Some(template) = chat_template(tokenizer_config, template_alt) {
        out.push(("tokenizer.chat_template".into(), Value::Str(template)));
    }
    Ok(Vocabulary {
        tokens: vocab_size as u64,
        metadata: out,
    })
}

/// The tokenizer's `model`, which must be byte-level BPE.
fn bpe_model(tokenizer: &Map<String, Json>) -> Result<&Map<String, Json>, Problem> {
    let model = tokenizer
        .get("model")
        .and_then(Json::as_object)
        .ok_or("no `model`")?;
    let kind = model.get("type").and_then(Json::as_str).unwrap_or("");
    if kind != "BPE" {
        return Err(Problem::Bad(format!(
            "the tokenizer model is `{kind}`; Catena converts byte-level BPE tokenizers"
        )));
    }
    Ok(model)
}

/// `model.vocab`'s tokens by id.
fn model_tokens(model: &Map<String, Json>) -> Result<HashMap<u64, String>, Problem> {
    let mut by_id: HashMap<u64, String> = HashMap::new();
    for (token, id) in model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or("no `model.vocab`")?
    {
        let id = id
            .as_u64()
            .ok_or_else(|| format!("the id of `{token}` is not a number"))?;
        by_id.insert(id, token.clone());
    }
    Ok(by_id)
}

/// The added tokens by id; each also takes its id's place in `by_id`.
fn added_tokens(
    tokenizer: &Map<String, Json>,
    by_id: &mut HashMap<u64, String>,
) -> Result<HashMap<u64, Added>, Problem> {
    let mut added: HashMap<u64, Added> = HashMap::new();
    for entry in tokenizer
        .get("added_tokens")
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let (Some(id), Some(content)) = (
            entry.get("id").and_then(Json::as_u64),
            entry.get("content").and_then(Json::as_str),
        ) else {
            return Err("an added token without an id or content".into());
        };
        let special = entry
            .get("special")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        by_id.insert(id, content.to_string());
        added.insert(
            id,
            Added {
                content: content.to_string(),
                special,
            },
        );
    }
    Ok(added)
}

/// The vocabulary's size: the configuration's `vocab_size`, or the tokenizer's own count, which
/// every token id must fit.
fn vocab_size(by_id: &HashMap<u64, String>, config: &ModelConfig) -> Result<usize, Problem> {
    let largest = by_id.keys().max().copied().unwrap_or(0);
    let vocab_size = match config.vocab_size {
        Some(n) => n,
        // Without `vocab_size` the tokenizer's own count is the vocabulary: bounded as one.
        None if by_id.len() as u64 <= MAX_VOCAB => by_id.len(),
        None => {
            return Err(Problem::OutOfRange {
                field: "model.vocab".into(),
                value: format!("{} tokens", by_id.len()),
                accepted: format!(
                    "at most {MAX_VOCAB} tokens (this converter's largest vocabulary)"
                ),
            });
        }
    };
    if by_id.is_empty() || largest >= vocab_size as u64 {
        return Err(Problem::Bad(format!(
            "token id {largest} does not fit the model's vocabulary of {vocab_size}"
        )));
    }
    Ok(vocab_size)
}

/// Every id's token and llama.cpp token type; ids the tokenizer leaves out become unused pads.
fn tokens_and_types(
    vocab_size: usize,
    by_id: &HashMap<u64, String>,
    added: &HashMap<u64, Added>,
) -> (Vec<String>, Vec<i32>) {
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for id in 0..vocab_size as u64 {
        match (by_id.get(&id), added.get(&id)) {
            (None, _) => {
                tokens.push(format!("[PAD{id}]"));
                types.push(UNUSED);
            }
            (Some(token), Some(a)) if a.special || looks_special(&a.content) => {
                tokens.push(token.clone());
                types.push(CONTROL);
            }
            (Some(token), Some(_)) => {
                tokens.push(token.replace('\u{2581}', " "));
                types.push(USER_DEFINED);
            }
            (Some(token), None) => {
                tokens.push(token.clone());
                types.push(NORMAL);
            }
        }
    }
    (tokens, types)
}

/// llama.cpp aborts the whole process (`GGML_ASSERT`, llama-vocab.cpp) on loading a vocabulary
/// that holds one text under two ids: an added token spelled like a vocabulary entry, two added
/// tokens alike, a token named like another id's `[PADn]`. An empty token counts as
/// `[EMPTY_<id>]`, the text llama.cpp puts in its place. Refused here, where the reason can be
/// said, rather than installed as a model that takes down every process that loads it.
fn check_unique(tokens: &[String]) -> Result<(), Problem> {
    let mut first: HashMap<Cow<'_, str>, usize> = HashMap::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        let text = if token.is_empty() {
            Cow::Owned(format!("[EMPTY_{id}]"))
        } else {
            Cow::Borrowed(token.as_str())
        };
        if let Some(earlier) = first.insert(text, id) {
            return Err(Problem::Bad(format!(
                "the ids {earlier} and {id} are both the token {token:?}: llama.cpp cannot \
                 load a vocabulary that holds a token twice"
            )));
        }
    }
    Ok(())
}

/// `tokenizer_config.json`'s chat template (the one named `default` of a list), else the
/// template found beside it.
fn chat_template(
    tokenizer_config: &Map<String, Json>,
    template_alt: Option<String>,
) -> Option<String> {
    match tokenizer_config.get("chat_template") {
        Some(Json::String(t)) => Some(t.clone()),
        Some(Json::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string),
        _ => template_alt,
    }
}

/// The key of a special token's id (llama.cpp's names, its spelling of "separator" included).
fn id_key(typ: &str) -> &'static str {
    match typ {
        "bos" => "bos_token_id",
        "eos" => "eos_token_id",
        "unk" => "unknown_token_id",
        "sep" => "seperator_token_id",
        "pad" => "padding_token_id",
        "cls" => "cls_token_id",
        _ => "mask_token_id",
    }
}

/// The merges as llama.cpp stores them: `"left right"`, a space inside a part written as U+0120
/// (what the byte-level alphabet uses for a space).
fn merges(model: &Map<String, Json>) -> Result<Vec<String>, String> {
    let list = model
        .get("merges")
        .and_then(Json::as_array)
        .ok_or("a BPE tokenizer without merges")?;
    list.iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) if pair.len() == 2 => {
                let part = |v: &Json| {
                    v.as_str()
                        .map(|s| s.replace(' ', "\u{120}"))
                        .ok_or("a merge that is not two strings".to_string())
                };
                Ok(format!("{} {}", part(&pair[0])?, part(&pair[1])?))
            }
            _ => Err("a merge that is not a string or a pair".to_string()),
        })
        .collect()
}

/// llama.cpp's pre-tokenizer for the regex the tokenizer splits text with before BPE.
fn pre_tokenizer(tokenizer: &Map<String, Json>) -> Result<&'static str, String> {
    let pre = tokenizer.get("pre_tokenizer").ok_or("no `pre_tokenizer`")?;
    let mut regexes = Vec::new();
    collect_regexes(pre, &mut regexes);
    match regexes.as_slice() {
        [regex] => PRE_TOKENIZERS
            .iter()
            .find(|(known, _)| known == regex)
            .map(|(_, name)| *name)
            .ok_or_else(|| {
                format!(
                    "the pre-tokenizer splits with a regex llama.cpp does not implement under a \
                     known name ({regex}); converting it would tokenize differently"
                )
            }),
        _ => Err(format!(
            "the pre-tokenizer has {} splitting regexes; Catena knows the Qwen2 and Llama 3 ones",
            regexes.len()
        )),
    }
}

fn collect_regexes(node: &Json, out: &mut Vec<String>) {
    match node {
        Json::Object(map) => {
            if map.get("type").and_then(Json::as_str) == Some("Split")
                && let Some(regex) = map
                    .get("pattern")
                    .and_then(|p| p.get("Regex"))
                    .and_then(Json::as_str)
            {
                out.push(regex.to_string());
            }
            for child in map.values() {
                collect_regexes(child, out);
            }
        }
        Json::Array(items) => items.iter().for_each(|i| collect_regexes(i, out)),
        _ => {}
    }
}

type Specials = (Vec<(&'static str, u32)>, Vec<(&'static str, bool)>);

/// The special token types llama.cpp has keys for, in the order their keys are written.
const SPECIAL_TYPES: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

/// Whether each special token is added to a prompt, in the order first decided. A later source
/// overwrites an earlier decision only where llama.cpp's converter lets it.
#[derive(Default)]
struct AddFlags(Vec<(&'static str, bool)>);

impl AddFlags {
    fn set(&mut self, typ: &'static str, value: bool, overwrite: bool) {
        match self.0.iter_mut().find(|(t, _)| *t == typ) {
            Some(entry) if overwrite => entry.1 = value,
            Some(_) => {}
            None => self.0.push((typ, value)),
        }
    }
}

/// The special token ids (from `tokenizer_config.json`'s `*_token` by content, then
/// `config.json`'s `*_token_id`) and whether BOS/EOS are added (from the post-processor, then
/// `tokenizer_config.json`'s `add_*_token`).
fn special_tokens(
    tokenizer: &Map<String, Json>,
    tokenizer_config: &Map<String, Json>,
    added: &HashMap<u64, Added>,
    config: &ModelConfig,
    vocab_size: usize,
) -> Result<Specials, String> {
    let mut add = AddFlags::default();
    let first_special = post_processor(tokenizer, &mut add)?;
    let mut bos_content = token_content(tokenizer_config, "bos");
    if let Some(first) = &first_special {
        if bos_content.is_none() {
            bos_content = Some(first.clone());
        }
        add.set("bos", bos_content.as_ref() == Some(first), true);
    }
    for typ in SPECIAL_TYPES {
        if let Some(Json::Bool(value)) = tokenizer_config.get(&format!("add_{typ}_token")) {
            add.set(typ, *value, false);
        }
    }
    let ids = special_ids(tokenizer_config, bos_content, added, config, vocab_size);
    Ok((ids, add.0))
}

/// What the post-processor says: BOS and EOS not added by a byte-level one, and the special
/// token a template puts first (then the BOS, when the template adds one).
fn post_processor(
    tokenizer: &Map<String, Json>,
    add: &mut AddFlags,
) -> Result<Option<String>, String> {
    let mut first_special = None;
    let Some(post) = tokenizer.get("post_processor").filter(|p| !p.is_null()) else {
        return Ok(first_special);
    };
    let processors = post
        .get("processors")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_else(|| vec![post.clone()]);
    for processor in &processors {
        match processor.get("type").and_then(Json::as_str) {
            Some("ByteLevel") => {
                add.set("bos", false, false);
                add.set("eos", false, false);
            }
            Some("TemplateProcessing") => {
                let single = processor
                    .get("single")
                    .and_then(Json::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                if single.len() > 1 {
                    first_special = single[0]
                        .get("SpecialToken")
                        .and_then(|t| t.get("id"))
                        .and_then(Json::as_str)
                        .map(str::to_string);
                }
            }
            Some(other) => {
                return Err(format!(
                    "the post-processor `{other}` is not supported by this converter"
                ));
            }
            None => {}
        }
    }
    Ok(first_special)
}

/// The content `tokenizer_config.json` gives the `typ` special token (`bos_token`, ...).
fn token_content(tokenizer_config: &Map<String, Json>, typ: &str) -> Option<String> {
    match tokenizer_config.get(&format!("{typ}_token")) {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Object(o)) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

/// Each special token's id: the smallest added token with its content, else the configuration's
/// `*_token_id` when it fits the vocabulary; in [`SPECIAL_TYPES`] order.
fn special_ids(
    tokenizer_config: &Map<String, Json>,
    bos_content: Option<String>,
    added: &HashMap<u64, Added>,
    config: &ModelConfig,
    vocab_size: usize,
) -> Vec<(&'static str, u32)> {
    let mut ids: Vec<(&'static str, u32)> = Vec::new();
    let id_of = |content: &str| {
        added
            .iter()
            .filter(|(_, a)| a.content == content)
            .map(|(id, _)| *id)
            .min()
    };
    for typ in SPECIAL_TYPES {
        let content = if typ == "bos" {
            bos_content.clone()
        } else {
            token_content(tokenizer_config, typ)
        };
        if let Some(id) = content.as_deref().and_then(id_of)
            && let Ok(id) = u32::try_from(id)
        {
            ids.push((typ, id));
        }
    }
    for (typ, id) in &config.special_ids {
        if let Some(typ) = SPECIAL_TYPES.iter().find(|t| *t == typ)
            && !ids.iter().any(|(t, _)| t == typ)
            && (*id as usize) < vocab_size
            && let Ok(id) = u32::try_from(*id)
        {
            ids.push((typ, id));
        }
    }
    ids.sort_by_key(|(t, _)| SPECIAL_TYPES.iter().position(|x| x == t));
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Architecture;

    fn config(vocab_size: usize) -> ModelConfig {
        ModelConfig {
            architecture: Architecture::Qwen2,
            hf_class: "Qwen2ForCausalLM".into(),
            block_count: 1,
            embedding: 4,
            feed_forward: 8,
            head_count: 1,
            head_count_kv: 1,
            head_dim: 4,
            vocab_size: Some(vocab_size),
            special_ids: vec![("bos".into(), 3), ("eos".into(), 4)],
            source_dtype_bytes: None,
            hyper_parameters: Vec::new(),
        }
    }

    fn qwen_like() -> Map<String, Json> {
        let json = serde_json::json!({
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                      "merges": ["a b", ["a", "b c"]]},
            "added_tokens": [
                {"id": 3, "content": "<|endoftext|>", "special": true},
                {"id": 4, "content": "<|im_end|>", "special": true},
                {"id": 5, "content": "<tool_call>", "special": false},
                {"id": 6, "content": "<|fim_pad|>", "special": false}
            ],
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PRE_TOKENIZERS[0].0}, "behavior": "Isolated"},
                {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
            "post_processor": {"type": "ByteLevel"}
        });
        json.as_object().unwrap().clone()
    }

    fn get<'a>(kv: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
        kv.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    #[test]
    fn a_qwen_tokenizer_becomes_llama_cpps_gpt2_vocabulary() {
        let tc = serde_json::json!({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "bos_token": null, "chat_template": "{{ messages }}"});
        let vocabulary = vocab(&qwen_like(), tc.as_object().unwrap(), None, &config(9)).unwrap();
        assert_eq!(vocabulary.tokens, 9);
        let kv = vocabulary.metadata;
        assert_eq!(
            get(&kv, "tokenizer.ggml.pre"),
            Some(&Value::Str("qwen2".into()))
        );
        let Some(Value::StrArray(tokens)) = get(&kv, "tokenizer.ggml.tokens") else {
            panic!("no tokens")
        };
        assert_eq!(tokens[7], "[PAD7]");
        assert_eq!(tokens.len(), 9);
        assert_eq!(
            get(&kv, "tokenizer.ggml.token_type"),
            Some(&Value::I32Array(vec![1, 1, 1, 3, 3, 4, 3, 5, 5]))
        );
        assert_eq!(
            get(&kv, "tokenizer.ggml.merges"),
            Some(&Value::StrArray(vec!["a b".into(), "a b\u{120}c".into()]))
        );
        // eos and pad by content; bos from config.json's id.
        assert_eq!(
            get(&kv, "tokenizer.ggml.bos_token_id"),
            Some(&Value::U32(3))
        );
        assert_eq!(
            get(&kv, "tokenizer.ggml.eos_token_id"),
            Some(&Value::U32(4))
        );
        assert_eq!(
            get(&kv, "tokenizer.ggml.padding_token_id"),
            Some(&Value::U32(3))
        );
        assert_eq!(
            get(&kv, "tokenizer.ggml.add_bos_token"),
            Some(&Value::Bool(false))
        );
        assert_eq!(
            get(&kv, "tokenizer.chat_template"),
            Some(&Value::Str("{{ messages }}".into()))
        );
    }

    #[test]
    fn tokenizers_llama_cpp_would_split_differently_are_refused() {
        let mut t = qwen_like();
        t["pre_tokenizer"] = serde_json::json!({"type": "Split", "pattern": {"Regex": "\\w+"}});
        let err = format!(
            "{:?}",
            vocab(&t, &Map::new(), None, &config(9)).err().unwrap()
        );
        assert!(err.contains("does not implement"), "{err}");
        let mut t = qwen_like();
        t["model"]["type"] = Json::String("Unigram".into());
        assert!(vocab(&t, &Map::new(), None, &config(9)).is_err());
        // A token id beyond the model's vocabulary.
        assert!(vocab(&qwen_like(), &Map::new(), None, &config(5)).is_err());
    }

    #[test]
    fn a_token_added_to_every_prompt_must_exist() {
        let no_bos = config(9);
        let tc = |add: bool| serde_json::json!({"add_bos_token": add, "eos_token": "<|im_end|>"});
        let mut t = qwen_like();
        t.remove("post_processor");
        let without = ModelConfig {
            special_ids: Vec::new(),
            ..no_bos
        };
        let read = |tc: Json| vocab(&t, tc.as_object().unwrap(), None, &without);
        assert!(read(tc(false)).is_ok());
        let Err(Problem::Bad(reason)) = read(tc(true)) else {
            panic!("a BOS added but never named was accepted");
        };
        assert!(
            reason.contains("adds a bos token to every prompt but names none"),
            "{reason}"
        );
        // Named by its content, it is found.
        let named = serde_json::json!({"add_bos_token": true, "bos_token": "<|endoftext|>"});
        assert!(read(named).is_ok());
    }

    #[test]
    fn a_vocabulary_with_a_token_twice_is_refused() {
        let refused = |edit: &dyn Fn(&mut Map<String, Json>)| {
            let mut t = qwen_like();
            edit(&mut t);
            match vocab(&t, &Map::new(), None, &config(9)) {
                Ok(_) => "accepted".to_string(),
                Err(Problem::Bad(reason)) => reason,
                Err(other) => format!("{other:?}"),
            }
        };
        assert_eq!(refused(&|_| {}), "accepted");
        let add = |id: u64, content: &str| {
            let token = serde_json::json!({"id": id, "content": content, "special": true});
            move |t: &mut Map<String, Json>| {
                t["added_tokens"]
                    .as_array_mut()
                    .unwrap()
                    .push(token.clone())
            }
        };
        // An added token spelled like a vocabulary entry, and like another added token.
        let err = refused(&add(7, "ab"));
        assert!(
            err.contains("the ids 2 and 7 are both the token \"ab\""),
            "{err}"
        );
        let err = refused(&add(8, "<|im_end|>"));
        assert!(err.contains("the ids 4 and 8"), "{err}");
        // Named like the pad that stands for id 8, which the tokenizer leaves out.
        let err = refused(&add(7, "[PAD8]"));
        assert!(err.contains("the ids 7 and 8"), "{err}");
        // An empty token is llama.cpp's `[EMPTY_<id>]`.
        let err = refused(&|t| {
            add(7, "")(t);
            add(8, "[EMPTY_7]")(t);
        });
        assert!(err.contains("the ids 7 and 8"), "{err}");
    }
}
