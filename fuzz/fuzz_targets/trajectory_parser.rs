//! Untrusted model output into the streaming parser, cut into arbitrary chunks: it must never
//! panic, and every character must come out exactly once.
#![no_main]

use catena_protocol::{ParseEvent, ParseIssue, Parser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // The first byte picks the chunk size; the rest is the text.
    let chunk = usize::from(data[0] % 16) + 1;
    let text = String::from_utf8_lossy(&data[1..]);
    let chars: Vec<char> = text.chars().collect();
    let mut parser = Parser::new();
    let mut events = Vec::new();
    for piece in chars.chunks(chunk) {
        let piece: String = piece.iter().collect();
        events.extend(parser.push(&piece));
    }
    events.extend(parser.finish());
    let mut out = String::new();
    for event in &events {
        match event {
            ParseEvent::Text(t) | ParseEvent::BlockDelta { text: t, .. } => out.push_str(t),
            ParseEvent::BlockStart(tag) => out.push_str(&tag.open()),
            ParseEvent::BlockEnd(block) if block.closed => out.push_str(&block.tag.close()),
            ParseEvent::Issue(ParseIssue::MismatchedClose { found, .. }) => {
                out.push_str(&found.close())
            }
            _ => {}
        }
    }
    assert_eq!(out, text);
});
