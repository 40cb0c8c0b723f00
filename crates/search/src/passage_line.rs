//! One line of a passage file. Two layouts are read:
//! - wiki-18, the corpus the multi-hop QA agents were trained against: `{"id": ..., "contents":
//!   "\"Title\"\ntext"}`, the title on the first line of `contents` (kept as written, quotes
//!   included: the retriever the agents learned from showed it that way);
//! - `{"id": ..., "title": ..., "text": ...}`, for passages of one's own.

use serde_json::Value;

/// A passage as read from its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassageRecord {
    pub id: String,
    pub title: String,
    pub text: String,
}

/// Reads one JSON line; the error says what is wrong with it.
pub fn parse_passage_line(line: &str) -> Result<PassageRecord, String> {
    let json: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Some(object) = json.as_object() else {
        return Err("not a JSON object".into());
    };
    let id = match object.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let text_of = |key: &str| object.get(key).and_then(Value::as_str);
    let (title, text) = match (text_of("contents"), text_of("title"), text_of("text")) {
        (Some(contents), _, _) => match contents.split_once('\n') {
            Some((title, text)) => (title.to_string(), text.to_string()),
            None => (String::new(), contents.to_string()),
        },
        (None, Some(title), Some(text)) => (title.to_string(), text.to_string()),
        _ => return Err("no `contents`, and no `title` with `text`".into()),
    };
    if text.trim().is_empty() {
        return Err("the passage has no text".into());
    }
    Ok(PassageRecord { id, title, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_are_read_and_the_title_is_kept_as_written() {
        let wiki = parse_passage_line(
            r#"{"id": "17", "contents": "\"Aaron\"\nAaron is a prophet.\nSecond line."}"#,
        )
        .unwrap();
        assert_eq!(wiki.id, "17");
        assert_eq!(wiki.title, "\"Aaron\"");
        assert_eq!(wiki.text, "Aaron is a prophet.\nSecond line.");
        let own = parse_passage_line(r#"{"id": 3, "title": "T", "text": "body"}"#).unwrap();
        assert_eq!((own.id.as_str(), own.title.as_str()), ("3", "T"));
        assert!(parse_passage_line("[1]").is_err());
        assert!(parse_passage_line(r#"{"id": "1", "title": "T"}"#).is_err());
        assert!(parse_passage_line(r#"{"contents": "\"T\"\n  "}"#).is_err());
    }
}
