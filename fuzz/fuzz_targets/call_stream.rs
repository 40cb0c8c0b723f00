//! Untrusted model output streamed as an OpenAI answer with tool calls, in each family's call
//! format, cut into arbitrary chunks: it must never panic, and when the answer is accepted what
//! the stream sent must add up to it (content, each call's start, each call's arguments), as
//! `catena serve` promises its streaming clients.
#![no_main]

use catena_chat_format::{CallDelta, CallFormat, CallStream, ToolSpec};
use libfuzzer_sys::fuzz_target;

const FORMATS: [CallFormat; 4] = [
    CallFormat::Hermes,
    CallFormat::Llama3,
    CallFormat::Mistral,
    CallFormat::Json,
];

fn tools() -> Vec<ToolSpec> {
    let object = serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}});
    ["get_weather", "write_file"]
        .into_iter()
        .map(|name| ToolSpec {
            name: name.to_string(),
            description: None,
            parameters: object.clone(),
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    // The first byte picks the format (low two bits) and the chunk size (the rest).
    let format = FORMATS[usize::from(first & 3)];
    let chunk = usize::from(first >> 2) % 24 + 1;
    let text = String::from_utf8_lossy(rest);
    let chars: Vec<char> = text.chars().collect();
    let mut stream = CallStream::new(format, tools());
    let mut deltas = Vec::new();
    for piece in chars.chunks(chunk) {
        deltas.extend(stream.push(&piece.iter().collect::<String>()));
    }
    let Ok((last, finished)) = stream.finish() else {
        return;
    };
    deltas.extend(last);
    let mut content = String::new();
    let mut started = Vec::new();
    let mut arguments: Vec<String> = Vec::new();
    for delta in deltas {
        match delta {
            CallDelta::Content(piece) => content.push_str(&piece),
            CallDelta::CallStart { index, id, name } => {
                assert_eq!(index, started.len(), "calls start in order");
                started.push((id, name));
                arguments.push(String::new());
            }
            CallDelta::Arguments { index, fragment } => arguments[index].push_str(&fragment),
        }
    }
    assert_eq!(
        content,
        finished.content.unwrap_or_default(),
        "streamed content"
    );
    assert_eq!(started.len(), finished.calls.len(), "calls started");
    for ((call, (id, name)), sent) in finished.calls.iter().zip(&started).zip(&arguments) {
        assert_eq!((&call.id, &call.name), (id, name), "a call's id and name");
        assert_eq!(&call.arguments, sent, "a call's streamed arguments");
    }
});
