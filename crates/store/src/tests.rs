use super::*;
use serde_json::json;

fn new_run<'a>(task: &'a str) -> NewRun<'a> {
    NewRun {
        session: None,
        kind: RunKind::Agent,
        task,
        profile: Some("math"),
        model: "qwen",
        adapter: None,
        options: json!({"temperature": 0.0}),
        system_prompt: "SYSTEM",
        user_prompt: "USER: what is 2+2?",
    }
}

fn finish(store: &Store, run: &str, trajectory: &str) {
    try_finish(store, run, trajectory).unwrap();
}

fn try_finish(store: &Store, run: &str, trajectory: &str) -> Result<(), StoreError> {
    store.finish_run(
        run,
        &RunEnd {
            status: RunStatus::Finished,
            answer: Some("4"),
            stop_reason: Some("answer"),
            trajectory: Some(trajectory),
            summary: Some(json!({"answer": "4"})),
            error: None,
            usage: Usage {
                prompt_tokens: 10,
                generated_tokens: 5,
                context_tokens: 15,
                cached_tokens: 0,
                tool_calls: 1,
            },
        },
    )
}

/// A stand-in for a full disk: every write `when` names (`BEFORE INSERT ON events`) fails, until
/// the trigger `full` is dropped.
fn fill_up(conn: &rusqlite::Connection, when: &str) {
    conn.execute_batch(&format!(
        "CREATE TRIGGER full {when} BEGIN SELECT RAISE(ABORT, 'disk full'); END;"
    ))
    .unwrap();
}

#[test]
fn runs_and_events_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let run = store.start_run(&new_run("What is 2+2?\nmore")).unwrap();
    assert_eq!(store.run(&run).unwrap().status, RunStatus::Running);
    for i in 0..3 {
        let seq = store
            .append_event(
                &run,
                "block_delta",
                &json!({"type": "block_delta", "i": i}),
                0,
            )
            .unwrap();
        assert_eq!(seq, i + 1);
    }
    let events = store.events(&run, 1).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].seq, 2);
    assert_eq!(events[1].data["i"], 2);
    finish(&store, &run, "<answer>4</answer>");
    let record = store.run(&run).unwrap();
    assert_eq!(record.status, RunStatus::Finished);
    assert_eq!(record.answer.as_deref(), Some("4"));
    assert_eq!(record.usage.tool_calls, 1);
    assert_eq!(record.options["temperature"], 0.0);
    let sessions = store.list_sessions(None, 10).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].title, "What is 2+2?");
    assert_eq!(sessions[0].runs, 1);
}

#[test]
fn runs_of_a_dead_process_become_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let first = Store::open_in(dir.path()).unwrap();
    let run = first.start_run(&new_run("long task")).unwrap();
    first
        .append_event(&run, "block_started", &json!({"type": "block_started"}), 0)
        .unwrap();
    // While the first process lives, a second one leaves its run alone.
    let second = Store::open_in(dir.path()).unwrap();
    assert_eq!(second.run(&run).unwrap().status, RunStatus::Running);
    drop(second);
    // The first one goes away without finishing the run (its lock is released, as at a kill).
    drop(first);
    let third = Store::open_in(dir.path()).unwrap();
    let record = third.run(&run).unwrap();
    assert_eq!(record.status, RunStatus::Interrupted);
    assert!(record.error.unwrap().contains("ended before it finished"));
    assert_eq!(third.events(&run, 0).unwrap().len(), 1);
}

#[test]
fn feedback_search_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let a = store.start_run(&new_run("primes below 100")).unwrap();
    let b = store.start_run(&new_run("the capital of Norway")).unwrap();
    store
        .set_feedback(&a, Some(Feedback::Good), Some("nice"))
        .unwrap();
    assert_eq!(store.run(&a).unwrap().feedback, Some(Feedback::Good));
    assert!(matches!(
        store.set_feedback("nope", Some(Feedback::Bad), None),
        Err(StoreError::NoRun(_))
    ));
    let found = store.list_sessions(Some("norway"), 10).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].title, "the capital of Norway");
    // LIKE wildcards in the search are literal.
    assert!(store.list_sessions(Some("%"), 10).unwrap().is_empty());
    let session = store.run(&b).unwrap().session_id;
    store.delete_session(&session).unwrap();
    assert!(matches!(store.run(&b), Err(StoreError::NoRun(_))));
    assert_eq!(store.list_sessions(None, 10).unwrap().len(), 1);
}

#[test]
fn runs_join_an_existing_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let first = store.start_run(&new_run("one")).unwrap();
    let session = store.run(&first).unwrap().session_id;
    let mut second = new_run("two");
    second.session = Some(&session);
    let second = store.start_run(&second).unwrap();
    assert_eq!(store.session_runs(&session).unwrap().len(), 2);
    assert_eq!(store.session_of(&second).unwrap(), session);
    let other = store.start_run(&new_run("elsewhere")).unwrap();
    assert_ne!(store.session_of(&other).unwrap(), session);
    assert!(matches!(
        store.session_of("missing"),
        Err(StoreError::NoRun(_))
    ));
    let mut lost = new_run("three");
    lost.session = Some("missing");
    assert!(matches!(
        store.start_run(&lost),
        Err(StoreError::NoSession(_))
    ));
}

#[test]
fn exports_filter_by_feedback() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let good = store.start_run(&new_run("good one")).unwrap();
    finish(&store, &good, "<answer>\\boxed{4}</answer>");
    store
        .set_feedback(&good, Some(Feedback::Good), None)
        .unwrap();
    let bad = store.start_run(&new_run("bad one")).unwrap();
    finish(&store, &bad, "<answer>5</answer>");
    store.set_feedback(&bad, Some(Feedback::Bad), None).unwrap();
    let _running = store.start_run(&new_run("still running")).unwrap();
    let mut chat = new_run("chat");
    chat.kind = RunKind::Chat;
    chat.options = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"}
    ]});
    let chat_run = store.start_run(&chat).unwrap();
    finish(&store, &chat_run, "goodbye");

    let mut out = Vec::new();
    let stats = store
        .export(ExportFormat::Sft, FeedbackFilter::Good, &mut out)
        .unwrap();
    assert_eq!(stats.written, 1);
    let line: SftRecord = serde_json::from_slice(out.trim_ascii_end()).unwrap();
    assert_eq!(line.id, good);
    assert_eq!(line.messages.len(), 3);
    assert_eq!(line.messages[1].content, "USER: what is 2+2?");
    assert_eq!(line.messages[2].content, "<answer>\\boxed{4}</answer>");

    let mut out = Vec::new();
    let stats = store
        .export(ExportFormat::Sft, FeedbackFilter::Any, &mut out)
        .unwrap();
    assert_eq!(stats.written, 3);
    let mut out = Vec::new();
    let stats = store
        .export(ExportFormat::Alpaca, FeedbackFilter::Any, &mut out)
        .unwrap();
    // The three-turn chat does not fit the alpaca layout.
    assert_eq!(
        stats,
        export::ExportStats {
            written: 2,
            skipped: 1
        }
    );
    let items: Vec<Value> = serde_json::from_slice(&out).unwrap();
    assert_eq!(items[0]["instruction"], "USER: what is 2+2?");
    assert_eq!(items[0]["input"], "");
    assert_eq!(items[1]["output"], "<answer>5</answer>");
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open_in(dir.path()).unwrap());
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    assert!(matches!(
        Store::open_in(dir.path()),
        Err(StoreError::TooNew { found: 99, .. })
    ));
}

#[test]
fn lock_files_go_with_their_owners_and_dead_ones_are_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let locks = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("catena-owners"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    for _ in 0..3 {
        drop(Store::open_in(dir.path()).unwrap());
    }
    assert_eq!(locks(), Vec::<String>::new());
    // A killed process leaves its file unlocked; a live one holds its own.
    let live = Store::open_in(dir.path()).unwrap();
    std::fs::write(dir.path().join("catena-owners/killed.lock"), "").unwrap();
    let next = Store::open_in(dir.path()).unwrap();
    assert_eq!(locks().len(), 2, "{:?}", locks());
    assert!(!locks().contains(&"killed.lock".to_string()));
    drop((live, next));
    assert_eq!(locks(), Vec::<String>::new());
}

#[test]
fn a_store_that_cannot_be_written_still_opens_for_reading() {
    let dir = tempfile::tempdir().unwrap();
    // The process goes away with its run still running; the next open would mark it.
    let run = Store::open_in(dir.path())
        .unwrap()
        .start_run(&new_run("long task"))
        .unwrap();
    // A stand-in for a full disk: the update that marks the run fails.
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    fill_up(&conn, "BEFORE UPDATE ON runs");
    drop(conn);
    let store = Store::open_in(dir.path()).unwrap();
    assert_eq!(store.run(&run).unwrap().status, RunStatus::Running);
    assert_eq!(store.list_sessions(None, 10).unwrap().len(), 1);
}

#[test]
fn a_run_that_cannot_be_recorded_leaves_no_empty_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    // A stand-in for a disk that fills between the session and its run.
    fill_up(&store.conn(), "BEFORE INSERT ON runs");
    assert!(store.start_run(&new_run("What is 19*23?")).is_err());
    assert!(store.list_sessions(None, 10).unwrap().is_empty());
}

#[test]
fn an_event_whose_commit_fails_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    // A stand-in for a commit that fails (a full disk): with foreign keys checked at commit, an
    // event of no run is refused only there.
    store
        .conn()
        .pragma_update(None, "defer_foreign_keys", "ON")
        .unwrap();
    assert!(
        store
            .append_event("no-such-run", "x", &json!({}), 0)
            .is_err()
    );
    assert!(store.events("no-such-run", 0).unwrap().is_empty());
}

#[test]
fn two_processes_appending_at_once_both_save_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let writers: Vec<_> = (0..2)
        .map(|i| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || {
                // A store of its own, as another process has: its own connection and owner.
                let store = Store::open_in(&dir).unwrap();
                let run = store.start_run(&new_run(&format!("task {i}"))).unwrap();
                let failed = (0..3000)
                    .filter(|n| store.append_event(&run, "x", &json!({"n": n}), 0).is_err())
                    .count();
                (failed, store.events(&run, 0).unwrap().len())
            })
        })
        .collect();
    for writer in writers {
        assert_eq!(writer.join().unwrap(), (0, 3000));
    }
}

#[test]
fn a_recorder_whose_store_fails_tells_its_followers_after_the_last_event_shown() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let run = store.start_run(&new_run("What is 19*23?")).unwrap();
    let mut recorder = Recorder::new(&store, run.clone());
    assert_eq!(recorder.raw(&json!({"type": "text", "text": "a"})).seq, 1);
    assert!(recorder.not_saved_notice().is_none());
    fill_up(&store.conn(), "BEFORE INSERT ON events");
    // Shown live all the same, numbered on.
    assert_eq!(recorder.raw(&json!({"type": "text", "text": "b"})).seq, 2);
    assert_eq!(recorder.raw(&json!({"type": "text", "text": "c"})).seq, 3);
    let notice = recorder.not_saved_notice().expect("a notice");
    assert_eq!(notice.seq, 4);
    assert_eq!(notice.data["type"], "not_saved");
    let message = notice.data["message"].as_str().unwrap();
    assert!(message.contains("disk full"), "{message}");
    // The notice is not written: the store keeps what it took.
    assert_eq!(store.events(&run, 0).unwrap().len(), 1);
}

#[test]
fn a_store_whose_folder_cannot_be_written_is_opened_for_reading() {
    let dir = tempfile::tempdir().unwrap();
    let run = {
        let store = Store::open_in(dir.path()).unwrap();
        let run = store.start_run(&new_run("What is 19*23?")).unwrap();
        finish(&store, &run, "T");
        run
    };
    // A file where the lock folder goes: no lock can be taken, as on a read-only disk.
    std::fs::remove_dir_all(dir.path().join("catena-owners")).unwrap();
    std::fs::write(dir.path().join("catena-owners"), "").unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    assert_eq!(store.run(&run).unwrap().status, RunStatus::Finished);
    assert_eq!(store.list_sessions(None, 10).unwrap().len(), 1);
    let refused = store.start_run(&new_run("again")).unwrap_err();
    assert!(matches!(refused, StoreError::ReadOnly(_)), "{refused}");
    assert!(store.append_event(&run, "x", &json!({}), 0).is_err());
    assert_eq!(store.events(&run, 0).unwrap().len(), 0);
}

#[test]
fn an_end_the_store_could_not_take_reads_as_ended_and_is_written_later() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let run = store.start_run(&new_run("What is 2+2?")).unwrap();
    // A stand-in for a full disk: the run's end cannot be written.
    fill_up(&store.conn(), "BEFORE UPDATE ON runs");
    assert!(try_finish(&store, &run, "<answer>4</answer>").is_err());
    // This process reads the run as it ended; another reads what is written: still running.
    let here = store.run(&run).unwrap();
    assert_eq!(here.status, RunStatus::Finished);
    assert_eq!(here.answer.as_deref(), Some("4"));
    let session = here.session_id.clone();
    assert_eq!(store.session_runs(&session).unwrap(), vec![here.clone()]);
    let other = Store::open_in(dir.path()).unwrap();
    assert_eq!(other.run(&run).unwrap().status, RunStatus::Running);
    // The next run started here writes it, once the store can take it.
    store.conn().execute_batch("DROP TRIGGER full;").unwrap();
    store.start_run(&new_run("What is 3+3?")).unwrap();
    assert_eq!(other.run(&run).unwrap(), here);
}

#[test]
fn events_saved_after_a_failure_keep_the_numbers_they_were_shown_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let run = store.start_run(&new_run("What is 19*23?")).unwrap();
    let mut recorder = Recorder::new(&store, run.clone());
    let text = |t: &str| json!({"type": "text", "text": t});
    assert_eq!(recorder.raw(&text("a")).seq, 1);
    // A stand-in for a disk that is full for a moment.
    fill_up(&store.conn(), "BEFORE INSERT ON events");
    assert_eq!(recorder.raw(&text("b")).seq, 2);
    store.conn().execute_batch("DROP TRIGGER full;").unwrap();
    let shown = recorder.raw(&text("c"));
    assert_eq!(shown.seq, 3);
    // A follower resuming after event 2 finds event 3 under the number it was shown with.
    let stored = store.events(&run, 2).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].seq, &stored[0].data), (3, &text("c")));
    // Another writer of the same run (a question's recorder) numbers after the last one stored.
    assert_eq!(Recorder::new(&store, run.clone()).raw(&text("d")).seq, 4);
    assert_eq!(recorder.raw(&text("e")).seq, 5);
}

/// A chat run asked with `messages` (as the OpenAI-compatible API stores one), in `session`.
fn chat_run<'a>(session: Option<&'a str>, messages: &[Value]) -> NewRun<'a> {
    NewRun {
        session,
        kind: RunKind::Chat,
        task: "q",
        profile: None,
        model: "qwen",
        adapter: None,
        options: json!({"messages": messages, "temperature": 0.2, "stream": true}),
        system_prompt: "",
        user_prompt: "q",
    }
}

/// A coding agent's conversation after `turns` turns: a long system prompt, then its turns.
fn conversation(turns: usize, topic: &str) -> Vec<Value> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a coding agent. ".repeat(50)})];
    for turn in 0..turns {
        messages.push(json!({"role": "user", "content": format!("{topic}: step {turn}")}));
        messages.push(
            json!({"role": "assistant", "content": format!("{topic}: done {turn}"), "name": null}),
        );
    }
    messages
}

fn count(store: &Store, table: &str) -> i64 {
    store
        .conn()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_conversation_asked_again_and_again_keeps_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let first = store
        .start_run(&chat_run(None, &conversation(1, "a")))
        .unwrap();
    let session = store.run(&first).unwrap().session_id;
    let mut runs = vec![first];
    for turns in 2..=10 {
        let run = chat_run(Some(&session), &conversation(turns, "a"));
        runs.push(store.start_run(&run).unwrap());
    }
    // The system prompt and twenty turns' messages, each once, counted by the ten lists that
    // hold it.
    assert_eq!(count(&store, "message_texts"), 21);
    assert_eq!(count(&store, "run_messages"), 10);
    let refs = |text: &str| -> i64 {
        store
            .conn()
            .query_row(
                "SELECT refs FROM message_texts WHERE text LIKE ?1",
                [text],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(refs("%coding agent%"), 10);
    assert_eq!(refs("%a: step 9%"), 1);
    // Each run reads back with the options it was given, in the same order.
    for (run, turns) in runs.iter().zip(1..) {
        let expected = chat_run(None, &conversation(turns, "a")).options;
        assert_eq!(store.run(run).unwrap().options, expected);
    }
    let listed = store.session_runs(&session).unwrap();
    assert_eq!(
        listed[9].options,
        chat_run(None, &conversation(10, "a")).options
    );
    // What the options keep besides the messages is stored with the run.
    let stored: String = store
        .conn()
        .query_row(
            "SELECT options_json FROM runs WHERE id = ?1",
            [&runs[9]],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&stored).unwrap(),
        json!({"temperature": 0.2, "stream": true})
    );
}

#[test]
fn deleting_a_conversation_removes_its_messages_and_keeps_those_another_shares() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let kept = store
        .start_run(&chat_run(None, &conversation(2, "kept")))
        .unwrap();
    let gone = store
        .start_run(&chat_run(None, &conversation(3, "gone")))
        .unwrap();
    let gone_session = store.run(&gone).unwrap().session_id;
    // The system prompt is shared; each conversation has its own turns.
    assert_eq!(count(&store, "message_texts"), 1 + 4 + 6);
    store.delete_session(&gone_session).unwrap();
    assert_eq!(count(&store, "message_texts"), 1 + 4);
    assert_eq!(count(&store, "run_messages"), 1);
    assert_eq!(
        store.run(&kept).unwrap().options,
        chat_run(None, &conversation(2, "kept")).options
    );
    assert!(matches!(
        store.delete_session(&gone_session),
        Err(StoreError::NoSession(_))
    ));
}

#[test]
fn a_chat_run_stored_with_its_messages_in_its_options_reads_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let run = store.start_run(&new_run("q")).unwrap();
    // As schema 2 kept a chat run: the messages inside its options.
    let options = chat_run(None, &conversation(2, "old")).options;
    store
        .conn()
        .execute(
            "UPDATE runs SET kind = 'chat', options_json = ?2 WHERE id = ?1",
            params![run, options.to_string()],
        )
        .unwrap();
    assert_eq!(store.run(&run).unwrap().options, options);
    // An agent run's options, without messages, are kept as they are.
    let agent = store.start_run(&new_run("q")).unwrap();
    assert_eq!(
        store.run(&agent).unwrap().options,
        json!({"temperature": 0.0})
    );
    assert_eq!(count(&store, "run_messages"), 0);
}

/// A store as schema 2 left it, with chat run `r` (session `s`) keeping its messages inline.
fn schema_2_store(dir: &Path) -> PathBuf {
    let path = dir.join(DB_FILE);
    let conn = Connection::open(&path).unwrap();
    for sql in &schema::MIGRATIONS[..2] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 2).unwrap();
    conn.execute_batch(
        "INSERT INTO sessions VALUES ('s', 't', 1, 1);
         INSERT INTO runs (id, session_id, kind, status, task, model, options_json,
             system_prompt, user_prompt, owner, started_ms)
         VALUES ('r', 's', 'chat', 'finished', 'q', 'm',
             '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}', '', 'q', 'o', 1);",
    )
    .unwrap();
    path
}

#[test]
fn a_store_of_schema_2_is_brought_to_3_and_its_runs_read_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = schema_2_store(dir.path());
    let store = Store::open(&path).unwrap();
    let version: i64 = store
        .conn()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, schema::MIGRATIONS.len() as i64);
    assert_eq!(
        store.run("r").unwrap().options,
        json!({"messages": [{"role": "user", "content": "hi"}]})
    );
    // A new run in the old session keeps its messages the new way.
    let new = store
        .start_run(&chat_run(
            Some("s"),
            &[json!({"role": "user", "content": "hi"})],
        ))
        .unwrap();
    assert_eq!(count(&store, "run_messages"), 1);
    assert_eq!(
        store.run(&new).unwrap().options["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
}

#[test]
fn kept_responses_share_their_messages_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let first = Value::Array(conversation(1, "r"));
    let second = Value::Array(conversation(2, "r"));
    store.put_response("resp_1", &first.to_string()).unwrap();
    store.put_response("resp_2", &second.to_string()).unwrap();
    // A chat run asked with the same conversation refers to the same texts.
    store
        .start_run(&chat_run(None, &conversation(2, "r")))
        .unwrap();
    assert_eq!(count(&store, "message_texts"), 5);
    let read = |id: &str| -> Value {
        serde_json::from_str(&store.response(id).unwrap().unwrap()).unwrap()
    };
    assert_eq!(read("resp_1"), first);
    assert_eq!(read("resp_2"), second);
    // Kept again under the same id: the new conversation replaces the old.
    store.put_response("resp_1", &second.to_string()).unwrap();
    assert_eq!(read("resp_1"), second);
    assert_eq!(count(&store, "response_messages"), 2);
    let refs = || -> i64 {
        store
            .conn()
            .query_row("SELECT SUM(refs) FROM message_texts", [], |r| r.get(0))
            .unwrap()
    };
    // Each of the five texts is in both responses and the chat run.
    assert_eq!(refs(), 15);
    // An empty conversation, one kept inline before schema 3, and none at all.
    store.put_response("resp_0", "[]").unwrap();
    assert_eq!(store.response("resp_0").unwrap().as_deref(), Some("[]"));
    store
        .conn()
        .execute(
            "INSERT INTO responses VALUES ('resp_old', 0, '[{\"role\":\"user\"}]')",
            [],
        )
        .unwrap();
    assert_eq!(
        store.response("resp_old").unwrap().as_deref(),
        Some("[{\"role\":\"user\"}]")
    );
    assert_eq!(store.response("resp_none").unwrap(), None);
    // Deleting the chat run's session keeps the texts the responses still use.
    let session = store.list_sessions(None, 10).unwrap()[0].id.clone();
    store.delete_session(&session).unwrap();
    assert_eq!(count(&store, "message_texts"), 5);
    assert_eq!(refs(), 10);
    assert_eq!(read("resp_2"), second);
}

/// A store of schema 2 that cannot be migrated is used as it is: on a full disk (the migration
/// fails: here a table of the same name is in its way), and on one that cannot be written.
#[test]
fn a_store_of_schema_2_that_cannot_be_migrated_is_used_as_it_is() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let dir = tempfile::tempdir().unwrap();
    let path = schema_2_store(dir.path());
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE message_texts (id INTEGER PRIMARY KEY);")
        .unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.run("r").unwrap().options["messages"], hi);
    // New runs and responses are kept as schema 2 kept them, and read back.
    let run = store.start_run(&chat_run(
        Some("s"),
        &[json!({"role": "user", "content": "hi"})],
    ));
    assert_eq!(store.run(&run.unwrap()).unwrap().options["messages"], hi);
    store.put_response("resp_1", &hi.to_string()).unwrap();
    assert_eq!(store.response("resp_1").unwrap(), Some(hi.to_string()));
    store.delete_session("s").unwrap();
    drop(store);

    // No lock can be taken in the folder (a read-only disk): opened for reading, read as it is.
    let dir = tempfile::tempdir().unwrap();
    let path = schema_2_store(dir.path());
    std::fs::write(dir.path().join("catena-owners"), "").unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.run("r").unwrap().options["messages"], hi);
    assert_eq!(store.session_runs("s").unwrap().len(), 1);
}
