//! Broken model files get a clear error and a non-zero exit, never a crash.

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_engine_api::EngineError;
use std::io::Write;
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

/// The real model with its token 1 (`"`) spelled like token 0 (`!`): the same length, so the
/// file stays whole. llama.cpp aborted the process on loading it.
fn with_a_token_twice(real: &[u8]) -> Vec<u8> {
    let key = b"tokenizer.ggml.tokens";
    let at = real.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // The array's type, its elements' type and its count; token 0 (a length and one byte);
    // token 1's length.
    let token_1 = at + 4 + 4 + 8 + (8 + 1) + 8;
    let mut copy = real.to_vec();
    assert_eq!((copy[token_1 - 9], copy[token_1]), (b'!', b'"'));
    copy[token_1] = b'!';
    copy
}

/// The real model with the metadata entry `key` holding `value` (a GGUF value type and its
/// bytes): changed in place where the file has the key with a value as long, else added at the
/// front of the metadata beside a filler string that keeps the tensor data 32-byte aligned.
fn with_entry(real: &[u8], key: &str, value_type: u32, value: &[u8]) -> Vec<u8> {
    let mut entry = (key.len() as u64).to_le_bytes().to_vec();
    entry.extend_from_slice(key.as_bytes());
    let mut copy = real.to_vec();
    if let Some(at) = real.windows(entry.len()).position(|w| w == entry) {
        let value_at = at + entry.len() + 4;
        assert_eq!(&real[at + entry.len()..value_at], &value_type.to_le_bytes());
        copy[value_at..value_at + value.len()].copy_from_slice(value);
        return copy;
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
    copy[16..24].copy_from_slice(&(count + 2).to_le_bytes());
    copy.splice(24..24, entry);
    copy
}

/// (file name, contents, what the error must say)
fn broken_files(dir: &Path) -> Vec<(String, &'static str)> {
    let real = std::fs::read(common::default_model()).unwrap();
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
            write(dir, "token-twice.gguf", &with_a_token_twice(&real)),
            "holds a token twice",
        ),
        // Each of these aborted the process in llama.cpp (GGML_ASSERT while reading the shape or
        // building the first graph), as the token twice did.
        (
            write(
                dir,
                "no-layers.gguf",
                &with_entry(&real, "qwen2.block_count", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.block_count is 0; llama.cpp runs 1 to 512 layers",
        ),
        (
            write(
                dir,
                "unknown-rope-scaling.gguf",
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
            write(
                dir,
                "no-rotary-dimensions.gguf",
                &with_entry(&real, "qwen2.rope.dimension_count", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.rope.dimension_count is 0",
        ),
        // This one loaded, and every run failed for want of room in a 256-token context.
        (
            write(
                dir,
                "no-context.gguf",
                &with_entry(&real, "qwen2.context_length", 4, &0u32.to_le_bytes()),
            ),
            "qwen2.context_length is 0: the model names no context it was trained for",
        ),
    ]
}

#[test]
fn the_library_explains_each_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    for (path, needle) in broken_files(dir.path()) {
        let err = match LlamaEngine::load(Path::new(&path), &LoadOptions::default()) {
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
        assert!(message.contains(&path), "{message}");
    }
    let missing = LlamaEngine::load(
        Path::new("/nonexistent/model.gguf"),
        &LoadOptions::default(),
    );
    assert!(matches!(missing, Err(EngineError::ModelNotFound { .. })));
}

#[test]
fn the_cli_exits_non_zero_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    for (path, needle) in broken_files(dir.path()) {
        let output = common::catena(&["run", "--model", &path, "--profile", "web", "hello"]);
        // 1 is an orderly error; a crash would be a signal (no code) or 134 (abort).
        assert_eq!(output.status.code(), Some(1), "{path}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error:"), "{stderr}");
        assert!(stderr.contains(needle), "{path}: {stderr}");
    }
}
