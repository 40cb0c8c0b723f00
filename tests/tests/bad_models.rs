//! Broken model files get a clear error and a non-zero exit, never a crash.

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine_api::EngineError;
use std::io::{Read, Write};
use std::path::Path;

/// A GGUF header with the given metadata and no tensors.
fn gguf_with(kv: &[(&str, &str)]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        out.extend_from_slice(&(k.len() as u64).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&8u32.to_le_bytes());
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
    path.display().to_string()
}

/// A change to the real model: bytes replaced at an offset (the file keeps its length), or bytes
/// put in at an offset. A broken copy is written by the kernel's file copy plus this change, not
/// built in memory: these copies are 470 MB each.
struct Edit {
    at: usize,
    bytes: Vec<u8>,
    insert: bool,
}

/// Writes the model at `model` changed by `edits` (in order of their offsets) to `dir/name`.
fn write_edited(dir: &Path, name: &str, model: &Path, edits: &[Edit]) -> String {
    use std::io::{Seek, SeekFrom};
    let path = dir.join(name);
    let mut source = std::fs::File::open(model).unwrap();
    let mut out = std::fs::File::create(&path).unwrap();
    let mut read_to = 0u64;
    for edit in edits {
        let at = edit.at as u64;
        std::io::copy(&mut (&mut source).take(at - read_to), &mut out).unwrap();
        out.write_all(&edit.bytes).unwrap();
        read_to = if edit.insert {
            at
        } else {
            at + edit.bytes.len() as u64
        };
        source.seek(SeekFrom::Start(read_to)).unwrap();
    }
    std::io::copy(&mut source, &mut out).unwrap();
    path.display().to_string()
}

/// The real model with its token 1 (`"`) spelled like token 0 (`!`): the same length, so the
/// file stays whole. llama.cpp aborted the process on loading it.
fn with_a_token_twice(real: &[u8]) -> Vec<Edit> {
    let key = b"tokenizer.ggml.tokens";
    let at = real.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // The array's type, its elements' type and its count; token 0 (a length and one byte);
    // token 1's length.
    let token_1 = at + 4 + 4 + 8 + (8 + 1) + 8;
    assert_eq!((real[token_1 - 9], real[token_1]), (b'!', b'"'));
    vec![Edit {
        at: token_1,
        bytes: b"!".to_vec(),
        insert: false,
    }]
}

/// The real model with the metadata entry `key` holding `value` (a GGUF value type and its
/// bytes): changed in place where the file has the key with a value as long, else added at the
/// front of the metadata beside a filler string that keeps the tensor data 32-byte aligned.
fn with_entry(real: &[u8], key: &str, value_type: u32, value: &[u8]) -> Vec<Edit> {
    let mut entry = (key.len() as u64).to_le_bytes().to_vec();
    entry.extend_from_slice(key.as_bytes());
    if let Some(at) = real.windows(entry.len()).position(|w| w == entry) {
        let value_at = at + entry.len() + 4;
        assert_eq!(&real[at + entry.len()..value_at], &value_type.to_le_bytes());
        return vec![Edit {
            at: value_at,
            bytes: value.to_vec(),
            insert: false,
        }];
    }
    entry.extend_from_slice(&value_type.to_le_bytes());
    entry.extend_from_slice(value);
    let filler_key = b"catena.test.filler";
    let bare = entry.len() + 8 + filler_key.len() + 4 + 8;
    let filler_len = (32 - bare % 32) % 32;
    entry.extend_from_slice(&(filler_key.len() as u64).to_le_bytes());
    entry.extend_from_slice(filler_key);
    entry.extend_from_slice(&8u32.to_le_bytes());
    entry.extend_from_slice(&(filler_len as u64).to_le_bytes());
    entry.resize(entry.len() + filler_len, b'x');
    // After the magic, the version and the two counts; two entries more.
    let count = u64::from_le_bytes(real[16..24].try_into().unwrap());
    vec![
        Edit {
            at: 16,
            bytes: (count + 2).to_le_bytes().to_vec(),
            insert: false,
        },
        Edit {
            at: 24,
            bytes: entry,
            insert: true,
        },
    ]
}

/// (file name, contents, what the error must say)
fn broken_files(dir: &Path) -> Vec<(String, &'static str)> {
    let model = common::default_model();
    let real = std::fs::read(&model).unwrap();
    let mut random = vec![0u8; 1 << 16];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in &mut random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    vec![
        (write(dir, "empty.gguf", b""), "the file is empty"),
        (write(dir, "random.gguf", &random), "not a GGUF file"),
        (write(dir, "header-only.gguf", &real[..4096]), "truncated"),
        (
            write(dir, "half.gguf", &real[..real.len() / 2]),
            "truncated",
        ),
        (
            write(
                dir,
                "alien.gguf",
                &gguf_with(&[("general.architecture", "catena-alien-arch")]),
            ),
            "not one the bundled llama.cpp knows",
        ),
        (
            write(
                dir,
                "encoder.gguf",
                &gguf_with(&[("general.architecture", "bert")]),
            ),
            "does not generate text",
        ),
        (
            write(
                dir,
                "adapter.gguf",
                &gguf_with(&[
                    ("general.type", "adapter"),
                    ("general.architecture", "qwen2"),
                ]),
            ),
            "LoRA adapter",
        ),
        (
            write_edited(dir, "token-twice.gguf", &model, &with_a_token_twice(&real)),
            "holds a token twice",
        ),
        // Each of these aborted the process in llama.cpp (GGML_ASSERT while reading the shape or
        // building the first graph), as the token twice did.
        (
            write_edited(
                dir,
                "no-layers.gguf",
                &model,
                &with_entry(&real, "qwen2.block_count", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.block_count is 0; llama.cpp runs 1 to 512 layers",
        ),
        (
            write_edited(
                dir,
                "unknown-rope-scaling.gguf",
                &model,
                &with_entry(
                    &real,
                    "qwen2.rope.scaling.type",
                    8,
                    b"\x05\0\0\0\0\0\0\0bogus",
                ),
            ),
            "qwen2.rope.scaling.type is \"bogus\"",
        ),
        (
            write_edited(
                dir,
                "no-rotary-dimensions.gguf",
                &model,
                &with_entry(&real, "qwen2.rope.dimension_count", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.rope.dimension_count is 0",
        ),
        // This one loaded, and every run failed for want of room in a 256-token context.
        (
            write_edited(
                dir,
                "no-context.gguf",
                &model,
                &with_entry(&real, "qwen2.context_length", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.context_length is 0: the model names no context it was trained for",
        ),
    ]
}

/// One folder of broken files for both checks (they are 470 MB copies).
#[test]
fn each_broken_file_is_explained_by_the_library_and_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let broken = broken_files(dir.path());
    the_library_explains_each_broken_file(&broken);
    the_cli_exits_non_zero_with_the_reason(&broken);
}

fn the_library_explains_each_broken_file(broken: &[(String, &str)]) {
    for (path, needle) in broken {
        let err = match LlamaEngine::load(Path::new(path), &LoadOptions::default()) {
            Ok(_) => panic!("{path} loaded"),
            Err(e) => e,
        };
        assert!(
            matches!(
                err,
                EngineError::BadModel { .. } | EngineError::LoadFailed { .. }
            ),
            "{path}: {err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(needle), "{path}: {message}");
        assert!(message.contains(path.as_str()), "{message}");
    }
    let missing = LlamaEngine::load(
        Path::new("/nonexistent/model.gguf"),
        &LoadOptions::default(),
    );
    assert!(matches!(missing, Err(EngineError::ModelNotFound { .. })));
}

fn the_cli_exits_non_zero_with_the_reason(broken: &[(String, &str)]) {
    for (path, needle) in broken {
        let output = common::catena(&["run", "--model", path, "--profile", "web", "hello"]);
        // 1 is an orderly error; a crash would be a signal (no code) or 134 (abort).
        assert_eq!(output.status.code(), Some(1), "{path}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error:"), "{stderr}");
        assert!(stderr.contains(needle), "{path}: {stderr}");
    }
}
