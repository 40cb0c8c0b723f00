//! `catena models random-weights`, the stand-in for the default model on a machine its weights
//! cannot reach (scripts/device-check.sh): made from the header alone, the same size and tensor
//! table as the real file, loaded and run by llama.cpp with finite numbers throughout.

mod common;

use catena_engine::llama::{LlamaEngine, LoadOptions};
use catena_gguf::GgufHeader;

#[test]
fn a_model_made_from_the_header_alone_has_the_real_ones_shape_and_runs_with_finite_numbers() {
    let real = common::default_model();
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("header.gguf");
    let model = dir.path().join("random.gguf");
    let like = real.to_str().unwrap();
    let made = common::catena(&[
        "models",
        "random-weights",
        "--like",
        like,
        "--out",
        header.to_str().unwrap(),
        "--header-only",
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let made = common::catena(&[
        "models",
        "random-weights",
        "--like",
        header.to_str().unwrap(),
        "--out",
        model.to_str().unwrap(),
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let (real_header, random_header) = (
        GgufHeader::read(&real).unwrap(),
        GgufHeader::read(&model).unwrap(),
    );
    assert!(
        std::fs::metadata(&header).unwrap().len() < 8 << 20,
        "the header is what travels"
    );
    assert_eq!(random_header.file_len, real_header.file_len);
    assert_eq!(random_header.tensors, real_header.tensors);
    assert_eq!(random_header.metadata.len(), real_header.metadata.len());

    let engine = LlamaEngine::load(&model, &LoadOptions::default()).unwrap();
    let generated = common::greedy(&engine, "What is 2 + 2?", 8);
    assert!(
        (1..=8).contains(&generated.len()),
        "{} tokens",
        generated.len()
    );
    for (_, logprob) in generated {
        assert!(
            logprob.is_finite() && logprob <= 0.0,
            "log-probability {logprob}"
        );
    }
}

#[test]
fn a_file_that_is_not_a_model_is_refused_with_the_reason_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.gguf");
    std::fs::write(&broken, b"GGUF\x03\x00\x00\x00 cut short").unwrap();
    let out = dir.path().join("out.gguf");
    let made = common::catena(&[
        "models",
        "random-weights",
        "--like",
        broken.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!made.status.success());
    let stderr = String::from_utf8_lossy(&made.stderr);
    assert!(stderr.contains("truncated"), "{stderr}");
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no partial file is left"
    );
}
