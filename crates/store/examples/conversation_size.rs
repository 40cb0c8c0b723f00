//! The store's size after a coding agent's conversation, each request stored as the
//! OpenAI-compatible API stores it, against the same requests kept whole in each run's options
//! (as schema 2 kept them): the anchor, written into a store of the same schema in the same run.
//!
//!     cargo run --release -p catena-store --example conversation_size [TURNS]
//!
//! The conversation: a 20 KB system prompt (a coding agent's instructions and tools), then per
//! turn a user message, an assistant message calling a tool and the tool's 3 KB result. Request
//! n carries the conversation up to turn n.

use catena_store::{NewRun, RunEnd, RunKind, RunStatus, Store, Usage};
use serde_json::{Value, json};
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let turns: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 100,
    };
    let system = "You are a coding agent. Use the tools to read and edit files. ".repeat(330);
    let mut messages = vec![json!({"role": "system", "content": system})];
    let requests: Vec<Vec<Value>> = (0..turns)
        .map(|turn| {
            messages.push(json!({"role": "user", "content": format!("Fix the failing test {turn} in src/lib.rs.")}));
            messages.push(json!({
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": format!("call_{turn}"), "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}],
            }));
            let file = format!("fn step_{turn}() -> u32 {{ {turn} }}\n").repeat(100);
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{turn}"), "content": file}));
            messages.clone()
        })
        .collect();
    let conversation_bytes = messages.iter().map(|m| m.to_string().len()).sum::<usize>();

    let dir = tempfile::tempdir()?;
    let (seconds, kept_once) = {
        let store = Store::open_in(&dir.path().join("kept-once"))?;
        let started = std::time::Instant::now();
        let mut session = None;
        for messages in &requests {
            let run = store.start_run(&chat_run(session.as_deref(), messages))?;
            store.finish_run(&run, &finished())?;
            if session.is_none() {
                session = Some(store.session_of(&run)?);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        drop(store);
        (seconds, store_size(&dir.path().join("kept-once"))?)
    };
    let whole = {
        let folder = dir.path().join("whole");
        Store::open_in(&folder)?;
        let db = rusqlite::Connection::open(folder.join(catena_store::DB_FILE))?;
        db.execute("INSERT INTO sessions VALUES ('s', 'q', 0, 0)", [])?;
        for (i, messages) in requests.iter().enumerate() {
            db.execute(
                "INSERT INTO runs (id, session_id, kind, status, task, model, options_json,
                     system_prompt, user_prompt, owner, started_ms, finished_ms, answer, trajectory)
                 VALUES (?1, 's', 'chat', 'finished', 'q', 'm', ?2, '', 'q', 'o', ?3, ?3, 'a', 'a')",
                rusqlite::params![format!("r{i}"), chat_run(None, messages).options.to_string(), i as i64],
            )?;
        }
        drop(db);
        store_size(&folder)?
    };
    println!(
        "{turns} requests, the last one {} KB: store {:.1} MB with each message kept once, {:.1} MB \
         with each request kept whole; ratio {:.3}; {:.2} ms a request started and finished",
        conversation_bytes / 1000,
        kept_once as f64 / 1e6,
        whole as f64 / 1e6,
        kept_once as f64 / whole as f64,
        seconds * 1000.0 / turns as f64,
    );
    Ok(())
}

fn chat_run<'a>(session: Option<&'a str>, messages: &[Value]) -> NewRun<'a> {
    NewRun {
        session,
        kind: RunKind::Chat,
        task: "q",
        profile: None,
        model: "m",
        adapter: None,
        options: json!({"messages": messages, "stream": true}),
        system_prompt: "",
        user_prompt: "q",
    }
}

fn finished() -> RunEnd<'static> {
    RunEnd {
        status: RunStatus::Finished,
        answer: Some("a"),
        stop_reason: None,
        trajectory: Some("a"),
        summary: None,
        error: None,
        usage: Usage::default(),
    }
}

/// The database's bytes once its write-ahead log is folded in.
fn store_size(folder: &Path) -> anyhow::Result<u64> {
    let path = folder.join(catena_store::DB_FILE);
    let db = rusqlite::Connection::open(&path)?;
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    drop(db);
    Ok(std::fs::metadata(&path)?.len())
}
