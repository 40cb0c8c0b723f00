use super::*;
use crate::{CallDelta, CallStream};
use serde_json::json;

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather in a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        }),
    }
}

#[test]
fn families_are_read_from_their_templates() {
    assert_eq!(
        CallFormat::detect("... <tool_call> ..."),
        CallFormat::Hermes
    );
    assert_eq!(
        CallFormat::detect("{{ '[TOOL_CALLS]' }}"),
        CallFormat::Mistral
    );
    assert_eq!(
        CallFormat::detect("<|start_header_id|>{% if tools %}"),
        CallFormat::Llama3
    );
    assert_eq!(CallFormat::detect("<start_of_turn>"), CallFormat::Json);
}

#[test]
fn hermes_calls_parse_with_prose_and_in_parallel() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}\n</tool_call>";
    let (content, calls) = CallFormat::Hermes.finish(text, &[weather()]).unwrap();
    assert_eq!(content, "Let me check.");
    assert_eq!(
        calls,
        vec![
            (
                "get_weather".to_string(),
                r#"{"city": "Paris"}"#.to_string()
            ),
            (
                "get_weather".to_string(),
                r#"{"city": "Rome", "days": 2}"#.to_string()
            ),
        ]
    );
}

#[test]
fn qwen_coder_fenced_json_counts_as_a_call_only_for_an_offered_tool() {
    let fenced = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
    let (content, calls) = CallFormat::Hermes.finish(fenced, &[weather()]).unwrap();
    assert_eq!(content, "");
    // The arguments as the model wrote them: what was streamed adds up to them.
    assert_eq!(calls[0].1, r#"{"city": "Oslo"}"#);
    let inside_tags = "<tool_call>\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```\n</tool_call>";
    let (_, calls) = CallFormat::Hermes
        .finish(inside_tags, &[weather()])
        .unwrap();
    assert_eq!(calls[0].1, r#"{"city": "Oslo"}"#);
    let other = "```json\n{\"name\": \"delete_all\", \"arguments\": {}}\n```";
    let (content, calls) = CallFormat::Hermes.finish(other, &[weather()]).unwrap();
    assert!(calls.is_empty());
    assert_eq!(content, other);
    let code = "Here:\n```python\nprint({'name': 1})\n```";
    assert_eq!(
        CallFormat::Hermes.finish(code, &[weather()]).unwrap().0,
        code
    );
}

#[test]
fn broken_calls_are_errors_with_the_text() {
    for text in [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>",
        "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
    ] {
        match CallFormat::Hermes.finish(text, &[weather()]) {
            Err(FormatError::BadCall { text: said, .. }) => assert_eq!(said, text),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn llama3_mistral_and_json_answers_parse() {
    let tools = [weather()];
    let llama = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}";
    let (_, calls) = CallFormat::Llama3.finish(llama, &tools).unwrap();
    assert_eq!(calls[0].1, r#"{"city": "Lima"}"#);
    let mistral = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}]";
    let (_, calls) = CallFormat::Mistral.finish(mistral, &tools).unwrap();
    assert_eq!(calls[0].0, "get_weather");
    let bare = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}]";
    assert_eq!(CallFormat::Mistral.finish(bare, &tools).unwrap().1.len(), 1);
    let envelope =
        "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Accra\"}}]}";
    let (content, calls) = CallFormat::Json.finish(envelope, &tools).unwrap();
    assert_eq!((content.as_str(), calls.len()), ("", 1));
    assert_eq!(
        CallFormat::Json.finish("It is sunny.", &tools).unwrap(),
        ("It is sunny.".to_string(), vec![])
    );
}

#[test]
fn grammars_follow_the_choice() {
    let tools = [weather()];
    assert_eq!(
        CallFormat::Hermes.constraint(&tools, &ToolChoice::None, true),
        None
    );
    let lazy = CallFormat::Hermes
        .constraint(&tools, &ToolChoice::Auto, true)
        .unwrap();
    assert_eq!(lazy.trigger.as_deref(), Some("<tool_call>"));
    assert!(
        lazy.grammar.starts_with("start: \"\\n\" call"),
        "{}",
        lazy.grammar
    );
    let forced = CallFormat::Hermes
        .constraint(&tools, &ToolChoice::Required, false)
        .unwrap();
    assert_eq!(forced.trigger, None);
    assert!(forced.grammar.starts_with("start: \"<tool_call>\\n\" call"));
    assert!(
        !forced.grammar.contains("){0,"),
        "one call only: {}",
        forced.grammar
    );
    assert!(forced.grammar.contains(r#"{"const":"get_weather"}"#));
    let parallel = CallFormat::Hermes
        .constraint(&tools, &ToolChoice::Required, true)
        .unwrap();
    assert!(parallel.grammar.contains("){0,7}"), "{}", parallel.grammar);
    // A family without a visible opening mark is enforced only when a call is required.
    assert_eq!(
        CallFormat::Llama3.constraint(&tools, &ToolChoice::Auto, true),
        None
    );
    assert!(
        CallFormat::Json
            .constraint(&tools, &ToolChoice::Required, true)
            .is_some()
    );
}

/// What a stream sends adds up to what the whole text parses to, wherever the text is cut.
fn stream_in_pieces(text: &str, size: usize) -> (String, Vec<(String, String)>) {
    stream_format_in_pieces(CallFormat::Hermes, text, size)
}

fn stream_format_in_pieces(
    format: CallFormat,
    text: &str,
    size: usize,
) -> (String, Vec<(String, String)>) {
    let mut stream = CallStream::new(format, vec![weather()]);
    let mut deltas = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(size) {
        deltas.extend(stream.push(&piece.iter().collect::<String>()));
    }
    let (last, finished) = stream.finish().unwrap();
    deltas.extend(last);
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for delta in deltas {
        match delta {
            CallDelta::Content(text) => content.push_str(&text),
            CallDelta::CallStart { index, name, .. } => {
                assert_eq!(index, calls.len(), "calls start in order, once");
                calls.push((name, String::new()));
            }
            CallDelta::Arguments { index, fragment } => calls[index].1.push_str(&fragment),
        }
    }
    assert_eq!(finished.content.unwrap_or_default(), content);
    let whole: Vec<(String, String)> = finished
        .calls
        .into_iter()
        .map(|c| (c.name, c.arguments))
        .collect();
    assert_eq!(whole, calls);
    (content, calls)
}

#[test]
fn streamed_pieces_add_up_to_the_whole_answer() {
    let text = "Checking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris {x}\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    for size in [1, 2, 3, 7, 50, 1000] {
        let (content, calls) = stream_in_pieces(text, size);
        assert_eq!(content, "Checking both.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].1, r#"{"city": "Paris {x}", "days": 3}"#);
    }
    let fenced =
        "Sure.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
    for size in [1, 4, 100] {
        let (content, calls) = stream_in_pieces(fenced, size);
        assert_eq!((content.as_str(), calls.len()), ("Sure.", 1));
    }
    // A fenced call streams its arguments as they come, like a marked one.
    let mut stream = CallStream::new(CallFormat::Hermes, vec![weather()]);
    let pieces = fenced
        .chars()
        .flat_map(|c| stream.push(&c.to_string()))
        .filter(|d| matches!(d, CallDelta::Arguments { .. }))
        .count();
    assert!(pieces > 5, "{pieces}");
    let prose = "No tool needed: 2 + 2 = 4. ```python\nprint(4)\n``` <b>done</b>";
    for size in [1, 5] {
        assert_eq!(stream_in_pieces(prose, size), (prose.to_string(), vec![]));
    }
}

#[test]
fn every_family_streams_its_calls_as_the_whole_answer_has_them() {
    let answers = [
        (
            CallFormat::Llama3,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
        ),
        (
            CallFormat::Llama3,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
        ),
        (
            CallFormat::Mistral,
            "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}]",
        ),
        (
            CallFormat::Json,
            "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Accra\"}}]}",
        ),
    ];
    for (format, text) in answers {
        for size in [1, 2, 4, 7, 1000] {
            // Llama's tag is not prose, and an envelope's arguments come whole: before, the
            // tag was streamed as content, and an envelope's first arguments were streamed as
            // the model wrote them and then read back respaced, so a client held `{"city":
            // "Accra"` without its brace.
            let (content, calls) = stream_format_in_pieces(format, text, size);
            assert_eq!(
                (content.as_str(), calls.len()),
                ("", 1),
                "{format:?} {size}"
            );
            let arguments: serde_json::Value = serde_json::from_str(&calls[0].1).unwrap();
            assert!(
                arguments["city"].is_string(),
                "{format:?} {size}: {calls:?}"
            );
        }
    }
}

#[test]
fn text_that_only_looked_like_a_call_is_prose_streamed_or_not() {
    // A Llama answer that opens like a call but whose object is broken: not a call.
    let text = "{\"name\": \"get_we: \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    for size in [1, 3, 1000] {
        let (content, calls) = stream_format_in_pieces(CallFormat::Llama3, text, size);
        assert_eq!((content.as_str(), calls.len()), (text, 0));
    }
    let whole = CallStream::read_whole(CallFormat::Llama3, vec![weather()], text).unwrap();
    assert_eq!(whole.content.as_deref(), Some(text));
}

#[test]
fn a_finished_answer_that_contradicts_what_was_streamed_is_an_error() {
    // While written, a call of `get_weather` (sent as it came); finished, its object is
    // followed by prose, so the whole text is not a call after all.
    let mut stream = CallStream::new(CallFormat::Llama3, vec![weather()]);
    let started = stream.push("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"O\"");
    assert!(
        started
            .iter()
            .any(|d| matches!(d, CallDelta::CallStart { name, .. } if name == "get_weather"))
    );
    stream.push("}, \"name\": \"get_weather\"} trailing prose");
    match stream.finish() {
        Err(FormatError::BadCall { reason, text }) => {
            assert!(reason.contains("does not match"), "{reason}");
            assert!(text.ends_with("trailing prose"));
        }
        other => panic!("{other:?}"),
    }
}

proptest::proptest! {
    #[test]
    fn any_cut_of_a_call_streams_consistently(cuts in proptest::collection::vec(1usize..12, 1..40)) {
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\\u00e3o \\\"P\\\"\", \"days\": 10}}\n</tool_call>";
        let mut stream = CallStream::new(CallFormat::Hermes, vec![weather()]);
        let mut args = String::new();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at >= text.len() { break; }
            let end = (at + cut).min(text.len());
            for delta in stream.push(&text[at..end]) {
                if let CallDelta::Arguments { fragment, .. } = delta { args.push_str(&fragment); }
            }
            at = end;
        }
        let (last, finished) = stream.finish().unwrap();
        for delta in last {
            if let CallDelta::Arguments { fragment, .. } = delta { args.push_str(&fragment); }
        }
        proptest::prop_assert_eq!(&args, &finished.calls[0].arguments);
        proptest::prop_assert!(serde_json::from_str::<serde_json::Value>(&args).is_ok());
    }
}
