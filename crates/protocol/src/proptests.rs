//! Property tests: what the renderer writes, the parser reads back, however the text is chunked;
//! and no input makes the parser panic or lose text.

use super::*;
use proptest::prelude::*;

/// Free text that cannot form a tag or a fence: `<` is never followed by a letter or `/`, and
/// backticks come one at a time.
fn plain_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 .,;:!?()\\[\\]{}=+*/\\\\'\"-]{1,12}",
            Just("\n".to_string()),
            Just("< 3".to_string()),
            Just("a <= b".to_string()),
            Just("x > y".to_string()),
            Just(" `x` ".to_string()),
            Just("héllo wörld ✓ 你好".to_string()),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

/// A fenced program whose code mentions tags, as models do when they print them.
fn fenced_code() -> impl Strategy<Value = String> {
    (
        plain_text(),
        prop::sample::select(Tag::ALL.to_vec()),
        any::<bool>(),
    )
        .prop_map(|(text, tag, close)| {
            let mention = if close { tag.close() } else { tag.open() };
            format!(
                "\n```py\nprint(\"{mention}\")  # {}\n```\n",
                text.replace('\n', " ")
            )
        })
}

fn content_for(tag: Tag) -> BoxedStrategy<String> {
    match tag {
        // Observations are opaque: any text without their own closing tag.
        Tag::Observation => prop_oneof![plain_text(), fenced_code()]
            .prop_filter("no closing tag", |s| !s.contains("</observation>"))
            .boxed(),
        _ => prop_oneof![plain_text(), fenced_code()].boxed(),
    }
}

fn blocks() -> impl Strategy<Value = Vec<(Tag, String)>> {
    proptest::collection::vec(
        prop::sample::select(Tag::ALL.to_vec())
            .prop_flat_map(|tag| content_for(tag).prop_map(move |c| (tag, c))),
        0..8,
    )
}

/// Splits `text` at the given fractions (on character boundaries).
fn chunk(text: &str, cuts: &[f64]) -> Vec<String> {
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let mut points: Vec<usize> = cuts
        .iter()
        .filter_map(|f| {
            boundaries
                .get((f * boundaries.len() as f64) as usize)
                .copied()
        })
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(text[last..p].to_string());
        last = p;
    }
    out.push(text[last..].to_string());
    out
}

fn parse_chunks(chunks: &[String]) -> Vec<ParseEvent> {
    let mut parser = Parser::new();
    let mut events = Vec::new();
    for c in chunks {
        events.extend(parser.push(c));
    }
    events.extend(parser.finish());
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn render_then_parse_gives_back_the_blocks(
        blocks in blocks(),
        separator in prop::sample::select(vec!["", "\n", "\n\n", " text "]),
        cuts in proptest::collection::vec(0.0f64..1.0, 0..12),
    ) {
        let text = render_blocks(blocks.iter().map(|(t, c)| (*t, c.as_str())), separator);
        let events = parse_chunks(&chunk(&text, &cuts));
        let parsed: Vec<(Tag, String)> = events
            .iter()
            .filter_map(|e| match e {
                ParseEvent::BlockEnd(b) => {
                    assert!(b.closed, "block not closed: {b:?} in {text:?}");
                    Some((b.tag, b.content.clone()))
                }
                _ => None,
            })
            .collect();
        prop_assert_eq!(&parsed, &blocks, "text: {:?}", text);
        let issues: Vec<_> = events.iter().filter(|e| matches!(e, ParseEvent::Issue(_))).collect();
        prop_assert!(issues.is_empty(), "issues {:?} in {:?}", issues, text);
    }

    #[test]
    fn any_input_parses_without_panic_or_loss(
        text in "(<|</|>|`|```|\n|[a-z_]{1,6}|think|answer|code|observation| |é){0,80}",
        cuts in proptest::collection::vec(0.0f64..1.0, 0..12),
    ) {
        let events = parse_chunks(&chunk(&text, &cuts));
        // Rebuild the text from the events: every character is accounted for.
        let mut out = String::new();
        for e in &events {
            match e {
                ParseEvent::Text(t) | ParseEvent::BlockDelta { text: t, .. } => out.push_str(t),
                ParseEvent::BlockStart(tag) => out.push_str(&tag.open()),
                ParseEvent::BlockEnd(b) if b.closed => out.push_str(&b.tag.close()),
                ParseEvent::Issue(ParseIssue::MismatchedClose { found, .. }) => out.push_str(&found.close()),
                _ => {}
            }
        }
        prop_assert_eq!(out, text);
    }

    #[test]
    fn chunking_never_changes_the_result(
        text in "(<|</|>|`|```|\n|think|answer|code|plan|observation|x| ){0,60}",
        cuts in proptest::collection::vec(0.0f64..1.0, 0..12),
    ) {
        let whole = parse_chunks(std::slice::from_ref(&text));
        let pieces = parse_chunks(&chunk(&text, &cuts));
        prop_assert_eq!(structure(&whole), structure(&pieces));
    }
}

/// The events with adjacent text pieces merged, so chunk sizes do not matter.
fn structure(events: &[ParseEvent]) -> Vec<ParseEvent> {
    let mut out: Vec<ParseEvent> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (Some(ParseEvent::Text(last)), ParseEvent::Text(next)) => last.push_str(next),
            (
                Some(ParseEvent::BlockDelta { tag: a, text: last }),
                ParseEvent::BlockDelta { tag: b, text: next },
            ) if a == b => last.push_str(next),
            _ => out.push(e.clone()),
        }
    }
    out
}
