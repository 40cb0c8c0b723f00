//! What an editor meets when it connects to `catena serve`: the connection answer (the base URL
//! as the server listens, the key), the context size in `/health`, and a prompt longer than the
//! context refused with OpenAI's `context_length_exceeded`, the sizes and the flag that raises
//! it, streamed or not, never cut short.

mod common;

use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const KEY: &str = "editor-key";
const CONTEXT: u64 = 2048;

fn http() -> reqwest::blocking::Client {
    common::http_client(Duration::from_secs(300))
}

fn model_id() -> String {
    common::default_model()
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A prompt of about 20,000 tokens (one short word is one token to Qwen's tokenizer).
fn long_prompt() -> String {
    "apple ".repeat(20_000)
}

#[test]
fn an_editor_finds_the_address_key_and_context_and_a_too_long_prompt_says_how_to_fix_it() {
    let store = tempfile::tempdir().unwrap();
    let served = common::serve(Command::new(common::catena_bin()), |cmd| {
        cmd.args(["--ctx-size", &CONTEXT.to_string(), "--sessions", "1"])
            .arg("--store-dir")
            .arg(store.path())
            .env("CATENA_API_KEY", KEY);
    });
    let base = served.base.clone();
    let client = http();

    let health: Value = client
        .get(format!("{base}/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["context_size"], CONTEXT, "{health}");

    // The connection answer is behind the key like every /v1 route.
    let refused = client.get(format!("{base}/v1/connection")).send().unwrap();
    assert_eq!(refused.status(), 401);
    let connection: Value = client
        .get(format!("{base}/v1/connection"))
        .bearer_auth(KEY)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        connection,
        json!({"base_url": format!("{base}/v1"), "api_key": KEY})
    );

    let request = json!({
        "model": model_id(),
        "messages": [{"role": "user", "content": long_prompt()}],
        "max_tokens": 8,
    });
    let answer = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&request)
        .send()
        .unwrap();
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().unwrap();
    let error = &body["error"];
    assert_eq!(error["code"], "context_length_exceeded", "{body}");
    assert_eq!(error["type"], "invalid_request_error", "{body}");
    assert_eq!(error["param"], "messages", "{body}");
    let message = error["message"].as_str().unwrap();
    for part in [
        format!("context is {CONTEXT} tokens"),
        "catena serve --ctx-size 32768".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message:?}");
    }
    let prompt_tokens: u64 = message
        .split("the prompt is ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no prompt size in {message:?}"));
    assert!(prompt_tokens > 19_000, "{message}");

    // Streamed, the stream starts only once the model does: the same 400 and the same error, on
    // Chat Completions and on the Responses API.
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&streamed)
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    let response = client
        .post(format!("{base}/v1/responses"))
        .bearer_auth(KEY)
        .json(&json!({"model": streamed["model"], "input": streamed["messages"], "stream": true}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");

    // The server goes on answering prompts that fit.
    let small: Value = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({
            "model": model_id(),
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 4,
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(small["object"], "chat.completion", "{small}");
}
