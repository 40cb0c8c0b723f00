//! The database schema, as numbered migrations applied in order (`PRAGMA user_version` records
//! how many ran). Never edit a migration that shipped: add the next one.

/// The oldest schema this build can use as it is (sessions, runs, events and responses), when
/// it cannot be migrated further.
pub(super) const USABLE_FROM: i64 = 2;

/// The schema from which messages are kept once (`messages.rs`).
pub(super) const MESSAGE_LISTS: i64 = 3;

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: sessions, runs, events.
    "
    CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        title       TEXT NOT NULL,
        created_ms  INTEGER NOT NULL,
        updated_ms  INTEGER NOT NULL
    );
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        session_id      TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        kind            TEXT NOT NULL CHECK (kind IN ('agent', 'chat')),
        status          TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'cancelled', 'interrupted')),
        task            TEXT NOT NULL,
        profile         TEXT,
        model           TEXT NOT NULL,
        adapter         TEXT,
        options_json    TEXT NOT NULL,
        system_prompt   TEXT NOT NULL,
        user_prompt     TEXT NOT NULL,
        owner           TEXT NOT NULL,
        started_ms      INTEGER NOT NULL,
        finished_ms     INTEGER,
        answer          TEXT,
        stop_reason     TEXT,
        trajectory      TEXT,
        summary_json    TEXT,
        error           TEXT,
        prompt_tokens     INTEGER,
        generated_tokens  INTEGER,
        context_tokens    INTEGER,
        cached_tokens     INTEGER,
        tool_calls        INTEGER,
        feedback        TEXT CHECK (feedback IN ('good', 'bad')),
        feedback_note   TEXT
    );
    CREATE INDEX runs_by_session ON runs(session_id, started_ms);
    CREATE INDEX runs_by_status ON runs(status);
    CREATE TABLE events (
        run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        at_ms   INTEGER NOT NULL,
        type    TEXT NOT NULL,
        data    TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    ",
    // 2: Responses API answers, so a conversation continues by `previous_response_id`.
    "
    CREATE TABLE responses (
        id            TEXT PRIMARY KEY,
        created_ms    INTEGER NOT NULL,
        conversation  TEXT NOT NULL
    );
    ",
    // 3: the messages of chat runs and of kept Responses API conversations, each text kept once
    // with the count of lists that refer to it; a list is a JSON array of `message_texts` ids
    // (messages.rs says why). A response's list has no key to its row, which `INSERT OR
    // REPLACE` replaces in place.
    "
    CREATE TABLE message_texts (
        id    INTEGER PRIMARY KEY,
        hash  BLOB NOT NULL UNIQUE,
        text  TEXT NOT NULL,
        refs  INTEGER NOT NULL
    );
    CREATE TABLE run_messages (
        run_id  TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        texts   TEXT NOT NULL
    );
    CREATE TABLE response_messages (
        response_id  TEXT PRIMARY KEY,
        texts        TEXT NOT NULL
    );
    ",
];
