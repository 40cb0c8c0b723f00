//! Small JSON helpers: grammar pieces, and reading JSON the model is still writing.

use serde_json::Value;

/// A string as a Lark literal (llguidance reads Lark strings with JSON's escapes).
pub(crate) fn lark_str(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// A `%json { ... }` grammar item for `schema`.
pub(crate) fn lark_json(schema: &Value) -> String {
    format!("%json {schema}")
}

/// The length of the JSON value at the start of `text` (after leading whitespace), if it is
/// complete; `None` while it is still open. Only objects and arrays are measured (what calls and
/// their arguments are); strings inside them may hold any bracket.
pub(crate) fn complete_value_len(text: &str) -> Option<usize> {
    let start = text.len() - text.trim_start().len();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(start + i + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The value of a string field `"key": "..."` in an object still being written, once its
/// closing quote is there.
pub(crate) fn string_field(text: &str, key: &str) -> Option<String> {
    let after = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[after..].trim_start().strip_prefix(':')?.trim_start();
    let len = string_len(rest)?;
    serde_json::from_str(&rest[..len]).ok()
}

/// The length of the JSON string literal at the start of `text`, if it is closed.
fn string_len(text: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut escaped = false;
    for (i, c) in chars {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// The text of the value of `"key":` in an object still being written, as far as it goes: the
/// arguments object of a call, streamed as the model writes it. `None` until the key is there.
pub(crate) fn field_value_so_far<'t>(text: &'t str, keys: &[&str]) -> Option<&'t str> {
    keys.iter().find_map(|key| {
        let after = text.find(&format!("\"{key}\""))? + key.len() + 2;
        let rest = text[after..].trim_start().strip_prefix(':')?;
        Some(rest.trim_start())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_measured_only_when_closed() {
        assert_eq!(complete_value_len(r#"{"a": "}{"} tail"#), Some(11));
        assert_eq!(complete_value_len(r#"  [1, {"b": [2]}]"#), Some(17));
        assert_eq!(complete_value_len(r#"{"a": "\"}"#), None);
        assert_eq!(complete_value_len("{"), None);
        assert_eq!(complete_value_len("plain"), None);
        assert_eq!(complete_value_len("}"), None);
    }

    #[test]
    fn fields_of_open_objects_are_read() {
        let text = r#"{"name": "get_weather", "arguments": {"city": "Par"#;
        assert_eq!(string_field(text, "name").as_deref(), Some("get_weather"));
        assert_eq!(
            field_value_so_far(text, &["arguments"]),
            Some(r#"{"city": "Par"#)
        );
        assert_eq!(string_field(r#"{"name": "get_wea"#, "name"), None);
        assert_eq!(lark_str("a\"b\n"), r#""a\"b\n""#);
    }
}
