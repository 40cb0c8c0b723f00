//! `catena doctor` and `catena models inspect` on the real default model, and on broken files.

mod common;

use serde_json::Value;

fn json(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn doctor_plans_the_default_model_and_measures_it() {
    let model = common::default_model();
    let model = model.to_str().unwrap();
    let output = common::catena(&["doctor", "--model", model, "--json"]);
    assert!(output.status.success(), "{output:?}");
    let report = json(&output);
    let machine = &report["machine"];
    assert!(machine["cpu"]["logical_cores"].as_u64().unwrap() >= 1);
    assert!(machine["ram_available"].as_u64().unwrap() > 0);
    assert!(
        machine["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["backend"] == "CPU")
    );
    assert_eq!(report["model"]["architecture"], "qwen2");
    assert_eq!(report["model"]["quantization"], "Q4_K_M");
    assert_eq!(report["model"]["shape"]["layers"], 24);
    let plan = &report["plan"];
    assert_eq!(plan["context"], 32768);
    assert_eq!(plan["kv_cache"], "f16");
    // Where llama.cpp found no GPU (CI never has one) nothing is planned for one, and that is
    // not a problem: the build line says so.
    let gpus = machine["devices"].as_array().unwrap();
    if !gpus.iter().any(|d| d["gpu"] == true) {
        assert_eq!(plan["gpu_layers"], 0);
    }
    assert!(report["speed"]["generation_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["speed"]["prompt_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(report["problems"], Value::Array(vec![]));

    // An override is kept, and what is wrong with it is said.
    let output = common::catena(&[
        "doctor",
        "--model",
        model,
        "--ctx-size",
        "65536",
        "--kv-cache",
        "q8_0",
        "--quick",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report = json(&output);
    assert_eq!(report["plan"]["context"], 65536);
    assert_eq!(report["plan"]["kv_cache"], "q8_0");
    let problems = report["problems"].to_string();
    assert!(problems.contains("trained on"), "{problems}");
    assert!(report["speed"].is_null());
}

#[test]
fn inspect_reports_the_real_model_and_names_what_is_wrong_with_a_cut_one() {
    let model = common::default_model();
    let output = common::catena(&["models", "inspect", model.to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{output:?}");
    let report = json(&output);
    assert_eq!(report["architecture"], "qwen2");
    assert_eq!(report["architecture_supported"], true);
    assert_eq!(report["file_size"], 491_400_064u64);
    assert_eq!(report["expected_size"], 491_400_064u64);
    assert_eq!(report["tensor_count"], 291);
    assert_eq!(report["chat_template"], true);
    assert_eq!(report["problems"], Value::Array(vec![]));

    // The first 300 MB of it: the header reads, the data is missing.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&cut, &bytes[..300_000_000]).unwrap();
    let output = common::catena(&["models", "inspect", cut.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("NOT usable"), "{text}");
    assert!(text.contains("truncated"), "{text}");
    assert!(text.contains("491400064"), "{text}");

    // Not a GGUF file at all: a clear error.
    let text_file = dir.path().join("notes.gguf");
    std::fs::write(&text_file, "hello").unwrap();
    let output = common::catena(&["models", "inspect", text_file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a GGUF file"));
}
