//! `catena train sft` as a user runs it: a run killed with SIGKILL resumes from its last
//! checkpoint and continues with the losses it would have had; malformed samples are reported,
//! not trained; the adapter it writes is loaded by `catena run --adapter`, and a broken adapter
//! is refused with a clear reason.

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn write_data(dir: &Path) -> std::path::PathBuf {
    let mut lines = Vec::new();
    for (i, (a, b)) in [
        (17, 23),
        (41, 7),
        (12, 12),
        (305, 3),
        (9, 99),
        (64, 8),
        (21, 21),
        (5, 555),
    ]
    .iter()
    .enumerate()
    {
        let trajectory = format!(
            "<think>\nMultiply with Python.\n</think>\n<code>\n```py\nprint({a} * {b})\n```\n</code>\n<observation>\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n{}\n[STDOUT:END]\n</observation>\n\n<answer>\\boxed{{{}}}</answer>",
            a * b,
            a * b
        );
        lines.push(serde_json::json!({
            "id": format!("m{i}"),
            "messages": [
                {"role": "user", "content": format!("What is {a} * {b}?")},
                {"role": "assistant", "content": trajectory},
            ]
        }));
    }
    // Two malformed samples: an observation never closed, and a two-turn chat.
    lines.push(serde_json::json!({"instruction": "q", "input": "", "output": "<code>x</code>\n<observation>\n1\n"}));
    lines.push(serde_json::json!({"messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}));
    let path = dir.join("data.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").expect("writing the data");
    path
}

fn train_command(data: &Path, out: &Path) -> Command {
    let model = common::default_model();
    let mut cmd = Command::new(common::catena_bin());
    cmd.args([
        "train", "sft", "--json", "--device", "cpu", "--rank", "4", "--alpha", "8",
    ])
    .args([
        "--epochs",
        "1",
        "--batch-tokens",
        "150",
        "--eval-fraction",
        "0",
        "--checkpoint-every",
        "1",
    ])
    .args([
        "--lr",
        "1e-3",
        "--dropout",
        "0.05",
        "--seed",
        "3",
        "--targets",
        "q,v,down",
    ])
    .arg("--base")
    .arg(&model)
    .arg("--data")
    .arg(data)
    .arg("--out")
    .arg(out);
    cmd
}

fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn step_losses(events: &[Value]) -> Vec<(u64, f64)> {
    events
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| (e["step"].as_u64().unwrap(), e["loss"].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_killed_run_resumes_with_the_same_losses_and_its_adapter_runs() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let data = write_data(dir.path());

    // The uninterrupted run.
    let whole = train_command(&data, &dir.path().join("whole"))
        .output()
        .expect("training");
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    let whole_events = events(&whole.stdout);
    let prepared = &whole_events[0];
    assert_eq!(prepared["event"], "prepared");
    assert_eq!(prepared["train_samples"], 8);
    let rejected: Vec<&str> = prepared["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["origin"].as_str().unwrap())
        .collect();
    assert_eq!(rejected, ["data.jsonl:9", "data.jsonl:10"]);
    let reference = step_losses(&whole_events);
    let total = prepared["total_steps"].as_u64().unwrap();
    assert!(total >= 4, "{total} steps");
    assert_eq!(reference.len() as u64, total);

    // The same run, killed right after its second checkpoint...
    let out = dir.path().join("killed");
    let mut child = train_command(&data, &out)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("training");
    let stdout = child.stdout.take().unwrap();
    let mut before_kill = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let done = event["event"] == "checkpoint" && event["step"] == 2;
        before_kill.push(event);
        if done {
            child.kill().expect("SIGKILL");
            break;
        }
    }
    child.wait().unwrap();
    assert_eq!(step_losses(&before_kill), reference[..2]);

    // ...and started again: it resumes at step 2 and goes on exactly as the whole run did.
    let resumed = train_command(&data, &out).output().expect("training");
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let resumed_events = events(&resumed.stdout);
    let resume = resumed_events
        .iter()
        .find(|e| e["event"] == "resumed")
        .expect("a resumed event");
    assert_eq!(resume["step"], 2);
    assert_eq!(step_losses(&resumed_events), reference[2..]);

    // The exports are there, and the runtime applies the adapter.
    let adapter = out.join("adapter.gguf");
    for file in [
        &adapter,
        &out.join("peft/adapter_model.safetensors"),
        &out.join("peft/adapter_config.json"),
        &out.join("loss.svg"),
    ] {
        assert!(file.is_file(), "{} is missing", file.display());
    }
    let svg = std::fs::read_to_string(out.join("loss.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("polyline"),
        "no curve drawn"
    );
    let run = common::catena(&[
        "run",
        "--json",
        "--no-store",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--adapter",
        adapter.to_str().unwrap(),
        "--adapter-scale",
        "0.5",
        "What is 6 * 7?",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    // A file that is not an adapter is refused before llama.cpp sees it, with the reason.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"GGUF but not really").unwrap();
    let bad = common::catena(&[
        "run",
        "--no-store",
        "--max-tokens",
        "4",
        "--adapter",
        junk.to_str().unwrap(),
        "hi",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("not a usable LoRA adapter"), "{err}");
    let model = common::default_model();
    let wrong = common::catena(&[
        "run",
        "--no-store",
        "--max-tokens",
        "4",
        "--adapter",
        model.to_str().unwrap(),
        "hi",
    ]);
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("not a LoRA adapter"));
}

/// The tensors of a GGUF file: name, dimensions and data bytes.
fn gguf_tensors(path: &Path) -> Vec<(String, Vec<u64>, Vec<u8>)> {
    let header = catena_gguf::GgufHeader::read(path).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let mut tensors: Vec<_> = header
        .tensors
        .iter()
        .map(|t| {
            let start = (header.data_offset + t.offset) as usize;
            let len = t.data_len().unwrap() as usize;
            (
                t.name.clone(),
                t.dims.clone(),
                bytes[start..start + len].to_vec(),
            )
        })
        .collect();
    tensors.sort();
    tensors
}

#[test]
fn a_peft_adapter_imports_as_the_gguf_adapter_the_trainer_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_data(dir.path());
    let out = dir.path().join("adapter");
    let trained = train_command(&data, &out)
        .args(["--max-steps", "1"])
        .output()
        .expect("training");
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let model = common::default_model();
    let name = format!("catena-test-peft-{}", std::process::id());
    let peft = out.join("peft");
    let import_adapter = || {
        common::catena(&[
            "models",
            "import-adapter",
            peft.to_str().unwrap(),
            "--base",
            model.to_str().unwrap(),
            "--name",
            &name,
        ])
    };
    let import = import_adapter();
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    let imported = std::path::PathBuf::from(String::from_utf8_lossy(&import.stdout).trim());
    let same = gguf_tensors(&imported) == gguf_tensors(&out.join("adapter.gguf"));
    let again = import_adapter();
    std::fs::remove_dir_all(imported.parent().unwrap()).unwrap();
    assert!(
        same,
        "the imported adapter's factors differ from the trainer's"
    );
    assert!(
        !again.status.success(),
        "a second import replaced the first"
    );

    // An adapter whose configuration does not match its factors is refused, and nothing stays.
    let config_path = peft.join("adapter_config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["r"] = 8.into();
    std::fs::write(&config_path, config.to_string()).unwrap();
    let refused = import_adapter();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("this adapter needs"), "{stderr}");
    assert!(!imported.parent().unwrap().exists());
}
