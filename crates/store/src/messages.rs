//! Conversations, each distinct message kept once: the messages a chat run was asked with, and
//! the conversation kept with each Responses API answer.
//!
//! A coding agent sends its whole conversation with every request, so a conversation of n turns
//! kept whole with each request grows as n² (docs/BENCHMARKS.md, "A conversation's messages
//! kept once": 300 requests of a coding agent's conversation took 149 MB, now 2.2 MB). Each
//! message's JSON is stored once, under its SHA-256, with a count of the lists that refer to it;
//! a run or a response keeps its list as a JSON array of the texts' row numbers, a few bytes a
//! message. A run reads back with its options as given (`messages` put back in place), a
//! response with its conversation. A text no list refers to any more is deleted with the last
//! list that did. Those stored before schema 3 kept their messages inline, and read as they did.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The key of a run's options that holds its conversation.
const MESSAGES: &str = "messages";

/// Whose list of messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum List {
    /// A chat run's (`run_messages`), deleted with its session.
    Run,
    /// A Responses API answer's kept conversation (`response_messages`).
    Response,
}

impl List {
    /// The table and its key column (fixed names, never from input).
    fn table(self) -> (&'static str, &'static str) {
        match self {
            List::Run => ("run_messages", "run_id"),
            List::Response => ("response_messages", "response_id"),
        }
    }
}

/// Takes the conversation out of a run's options, to be stored by [`write`]: `None` when the
/// options hold no list of messages (an agent run's).
pub(crate) fn take(options: &mut Value) -> Option<Vec<Value>> {
    let object = options.as_object_mut()?;
    if !object.get(MESSAGES).is_some_and(Value::is_array) {
        return None;
    }
    match object.remove(MESSAGES) {
        Some(Value::Array(messages)) => Some(messages),
        _ => None,
    }
}

/// Stores `id`'s messages in place of any it had: each text once (one already kept is counted
/// once more), then the list, in order.
pub(crate) fn write(
    tx: &Transaction<'_>,
    list: List,
    id: &str,
    messages: &[Value],
) -> Result<(), rusqlite::Error> {
    release(tx, list, id)?;
    let mut keep = tx.prepare_cached(
        "INSERT INTO message_texts (hash, text, refs) VALUES (?1, ?2, 1)
         ON CONFLICT (hash) DO UPDATE SET refs = refs + 1
         RETURNING id",
    )?;
    let mut texts = Vec::with_capacity(messages.len());
    for message in messages {
        let text = message.to_string();
        let hash = Sha256::digest(text.as_bytes()).to_vec();
        texts.push(keep.query_row(params![hash, text], |r| r.get::<_, i64>(0))?);
    }
    let (table, key) = list.table();
    tx.execute(
        &format!("INSERT INTO {table} ({key}, texts) VALUES (?1, ?2)"),
        params![id, Value::from(texts).to_string()],
    )?;
    Ok(())
}

/// `id`'s stored messages, in order; `None` when it has none stored this way.
pub(crate) fn read(
    conn: &Connection,
    list: List,
    id: &str,
) -> Result<Option<Vec<Value>>, rusqlite::Error> {
    let Some(texts) = text_ids(conn, list, id)? else {
        return Ok(None);
    };
    let mut text = conn.prepare_cached("SELECT text FROM message_texts WHERE id = ?1")?;
    let messages = texts
        .iter()
        .map(|&text_id| {
            let found: String = text
                .query_row([text_id], |r| r.get(0))
                .map_err(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => broken(format!(
                        "message {text_id} of {id}'s conversation is missing"
                    )),
                    e => e,
                })?;
            Ok(serde_json::from_str(&found).unwrap_or(Value::String(found)))
        })
        .collect::<Result<_, rusqlite::Error>>()?;
    Ok(Some(messages))
}

/// Puts a run's stored messages back into its options. A run stored with its messages inside
/// its options (schema 2), or without any, is left as it is.
pub(crate) fn restore(
    conn: &Connection,
    run: &str,
    options: &mut Value,
) -> Result<(), rusqlite::Error> {
    let Some(messages) = read(conn, List::Run, run)? else {
        return Ok(());
    };
    if !options.is_object() {
        *options = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(object) = options {
        object.insert(MESSAGES.to_string(), Value::Array(messages));
    }
    Ok(())
}

/// Lets go of the lists of `session`'s runs, before the session is deleted: the texts no other
/// list refers to go, so a deleted conversation's words leave the store with it.
pub(crate) fn release_session(tx: &Transaction<'_>, session: &str) -> Result<(), rusqlite::Error> {
    let runs: Vec<String> = {
        let mut stmt = tx.prepare(
            "SELECT m.run_id FROM run_messages m JOIN runs r ON r.id = m.run_id
             WHERE r.session_id = ?1",
        )?;
        stmt.query_map([session], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    for run in runs {
        release(tx, List::Run, &run)?;
    }
    Ok(())
}

/// Removes `id`'s list, counting each of its texts once less and deleting those then unused.
fn release(tx: &Transaction<'_>, list: List, id: &str) -> Result<(), rusqlite::Error> {
    let Some(texts) = text_ids(tx, list, id)? else {
        return Ok(());
    };
    let mut uncount =
        tx.prepare_cached("UPDATE message_texts SET refs = refs - 1 WHERE id = ?1")?;
    for text_id in &texts {
        uncount.execute([text_id])?;
    }
    let mut unused = tx.prepare_cached("DELETE FROM message_texts WHERE id = ?1 AND refs <= 0")?;
    for text_id in &texts {
        unused.execute([text_id])?;
    }
    let (table, key) = list.table();
    tx.execute(&format!("DELETE FROM {table} WHERE {key} = ?1"), [id])?;
    Ok(())
}

/// The row numbers of `id`'s texts, in order; `None` when it has no list.
fn text_ids(conn: &Connection, list: List, id: &str) -> Result<Option<Vec<i64>>, rusqlite::Error> {
    let (table, key) = list.table();
    let texts: Option<String> = conn
        .prepare_cached(&format!("SELECT texts FROM {table} WHERE {key} = ?1"))?
        .query_row([id], |r| r.get(0))
        .optional()?;
    texts
        .map(|texts| {
            serde_json::from_str(&texts)
                .map_err(|e| broken(format!("the list of {id}'s messages is not a list: {e}")))
        })
        .transpose()
}

fn broken(reason: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, reason.into())
}
