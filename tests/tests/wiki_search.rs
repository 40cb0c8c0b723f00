//! `<wiki_search>` end to end: a passage file in the wiki-18 layout is indexed with
//! `catena index add`, searched with `catena index search`, and a run of the real binary and
//! default model with a prefilled `<wiki_search>` call gets the top three passages in exactly
//! the protocol's format (docs/PROTOCOL.md §3), and the duplicate guard's notice for a repeat.

mod common;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A small corpus: the passages a two-hop question needs, and distractors sharing its words.
fn passages() -> Vec<Value> {
    let rows = [
        (
            "Analytical Engine",
            "The Analytical Engine was a proposed mechanical general-purpose computer designed by the English mathematician Charles Babbage, first described in 1837.",
        ),
        (
            "Charles Babbage",
            "Charles Babbage was an English polymath, born in London in 1791, who originated the concept of a digital programmable computer.",
        ),
        (
            "Ada Lovelace",
            "Ada Lovelace was an English mathematician known for her work on Charles Babbage's proposed Analytical Engine; she published the first algorithm intended for it.",
        ),
        (
            "Difference engine",
            "A difference engine is an automatic mechanical calculator designed to tabulate polynomial functions.",
        ),
        (
            "Steam engine",
            "A steam engine is a heat engine that performs mechanical work using steam as its working fluid.",
        ),
        (
            "London",
            "London is the capital and largest city of England and the United Kingdom.",
        ),
        (
            "Jet engine",
            "A jet engine is a type of reaction engine discharging a fast-moving jet of heated gas.",
        ),
        (
            "Harbour",
            "A harbour is a sheltered body of water where ships, boats and barges can be moored.",
        ),
    ];
    rows.iter()
        .enumerate()
        .map(|(i, (title, text))| json!({"id": (i + 1).to_string(), "contents": format!("\"{title}\"\n{text}")}))
        .collect()
}

fn catena_in(data: &Path) -> Command {
    let mut cmd = Command::new(common::catena_bin());
    cmd.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", common::paths().cache_dir)
        .env("CATENA_STORE_DIR", data.join("sessions"));
    cmd
}

/// A run of the default model in the mhqa profile with `prefill`: its JSON events.
fn run_mhqa(data: &Path, prefill: &str, question: &str) -> Vec<Value> {
    let run = catena_in(data)
        .args(["run", "--model"])
        .arg(common::default_model())
        .args([
            "--profile",
            "mhqa",
            "--json",
            "--seed",
            "3",
            "--max-tokens",
            "24",
        ])
        .args(["--no-store", "--prefill", prefill, question])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    common::json_lines(&run)
}

#[test]
fn a_prefilled_wiki_search_gets_the_top_three_passages_in_the_protocols_format() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let file = data.join("wiki-small.jsonl");
    let mut lines: Vec<String> = passages().iter().map(Value::to_string).collect();
    lines.insert(3, "{\"id\": \"broken\"".into());
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();

    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&add.stderr);
    assert!(add.status.success(), "{stderr}");
    assert!(stderr.contains("Indexed 8 passages"), "{stderr}");
    assert!(
        stderr.contains("1 lines that were not passages skipped"),
        "{stderr}"
    );
    let again = catena_in(data)
        .args(["index", "add"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));

    let list = catena_in(data)
        .args(["index", "list", "--json"])
        .output()
        .unwrap();
    let indexes: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(indexes[0]["name"], "wiki-small", "{indexes}");
    assert_eq!(indexes[0]["entries"], 8, "{indexes}");
    assert_eq!(indexes[0]["kind"], "passages", "{indexes}");

    let query = "Who designed the Analytical Engine?";
    let search = catena_in(data)
        .args(["index", "search", "wiki-small", query])
        .output()
        .unwrap();
    assert!(search.status.success());
    let shown = String::from_utf8_lossy(&search.stdout)
        .trim_end()
        .to_string();
    assert!(
        shown.starts_with("Doc 1 (Title: \"Analytical Engine\")\nThe Analytical Engine was"),
        "{shown}"
    );

    let prefill = format!(
        "<plan>Find who designed the engine, then where that person was born.</plan>\n\
         <think>Search the wiki.</think>\n<wiki_search>{query}</wiki_search>\n\
         <wiki_search>{query}</wiki_search>"
    );
    let events = run_mhqa(
        data,
        &prefill,
        "Where was the designer of the Analytical Engine born?",
    );
    let observations: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "observation")
        .collect();
    assert!(observations.len() >= 2, "{events:?}");
    // The first search: exactly what `catena index search` showed, which is the protocol's text.
    assert_eq!(observations[0]["text"].as_str().unwrap(), shown);
    assert_eq!(
        shown.matches("\n\nDoc ").count(),
        2,
        "three passages: {shown}"
    );
    assert!(
        shown.contains("(Title: \"Charles Babbage\")")
            || shown.contains("(Title: \"Ada Lovelace\")"),
        "{shown}"
    );
    assert!(!shown.contains("Harbour"), "{shown}");
    // The repeat: the duplicate guard answers without searching again.
    assert!(
        observations[1]["text"]
            .as_str()
            .unwrap()
            .contains("already searched"),
        "{:?}",
        observations[1]
    );
}

#[test]
fn without_an_index_the_tool_says_how_to_build_one() {
    let data = tempfile::tempdir().unwrap();
    let events = run_mhqa(
        data.path(),
        "<plan>p</plan>\n<wiki_search>Babbage</wiki_search>",
        "Who was Babbage?",
    );
    let observation = events
        .iter()
        .find(|e| e["type"] == "observation")
        .expect("an observation");
    assert!(
        observation["text"]
            .as_str()
            .unwrap()
            .contains("catena index add"),
        "{observation}"
    );
}

#[test]
fn eval_scores_qa_tasks_with_the_mhqa_profile_over_a_passage_index() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let file = data.join("wiki-small.jsonl");
    let lines: Vec<String> = passages().iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let add = catena_in(data)
        .args(["index", "add"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(add.status.success());
    let tasks = data.join("qa.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\": \"born\", \"kind\": \"qa\", \"question\": \"In which city was the designer of \
         the Analytical Engine born?\", \"answer\": \"London\"}\n\
         {\"id\": \"algorithm\", \"kind\": \"qa\", \"question\": \"Who published the first \
         algorithm for the Analytical Engine?\", \"answer\": \"Ada Lovelace\"}\n",
    )
    .unwrap();
    let eval = |index: &str| {
        catena_in(data)
            .args(["eval", "--model"])
            .arg(common::default_model())
            .args(["--profile", "mhqa", "--wiki-index", index, "--json"])
            .args(["--max-tokens", "96", "--tasks"])
            .arg(&tasks)
            .output()
            .unwrap()
    };
    let run = eval("wiki-small");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        (report["profile"].as_str(), report["tasks"].as_u64()),
        (Some("mhqa"), Some(2))
    );
    // QA tasks are scored by exact match with token F1 beside it.
    let f1 = report["mean_f1"]
        .as_f64()
        .unwrap_or_else(|| panic!("{report}"));
    assert!((0.0..=1.0).contains(&f1), "{report}");
    for result in report["results"].as_array().unwrap() {
        let reward = result["reward"].as_f64().unwrap();
        let f1 = result["f1"].as_f64().unwrap();
        assert!(reward == 0.0 || (reward == 1.0 && f1 == 1.0), "{result}");
    }
    // An index that is not there is refused before any task runs.
    let missing = eval("no-such-index");
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("no index named `no-such-index`"),
        "{stderr}"
    );
}
