//! Short-answer QA (PROTOCOL.md §6: exact match after normalising: lower case, no punctuation,
//! no articles), plus the token-overlap F1 the QA benchmarks
//! report beside it.
//!
//! The gold answer may list several acceptable answers, separated by `|` (the protocol's
//! multi-answer form) or as a JSON list of strings (how verl parquet files often store them);
//! a given answer scores its best match among them.

use std::collections::HashMap;

/// Lower-case, punctuation removed, the articles a/an/the removed, whitespace collapsed.
pub fn qa_normalise(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punctuation: String = lower
        .chars()
        .map(|c| if is_punctuation(c) { ' ' } else { c })
        .collect();
    no_punctuation
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Punctuation becomes a space (so `state-of-the-art` is four words, not one).
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            c,
            '‘' | '’' | '“' | '”' | '–' | '—' | '…' | '«' | '»' | '¿' | '¡' | '·' | '„'
        )
}

/// Whether `given` equals one of the gold answers after [`qa_normalise`].
pub fn qa_exact_match(given: &str, gold: &str) -> bool {
    let given = qa_normalise(given);
    !given.is_empty() && gold_answers(gold).iter().any(|g| qa_normalise(g) == given)
}

/// Token-overlap F1 between `given` and the best of the gold answers, in 0..=1.
pub fn qa_f1(given: &str, gold: &str) -> f64 {
    let given = qa_normalise(given);
    gold_answers(gold)
        .iter()
        .map(|g| token_f1(&given, &qa_normalise(g)))
        .fold(0.0, f64::max)
}

/// The acceptable answers in `gold`: a JSON list of strings, or `|`-separated text.
pub fn gold_answers(gold: &str) -> Vec<String> {
    let trimmed = gold.trim();
    if trimmed.starts_with('[')
        && let Ok(list) = serde_json::from_str::<Vec<serde_json::Value>>(trimmed)
    {
        return list
            .into_iter()
            .map(|v| match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
    }
    trimmed.split('|').map(|s| s.trim().to_string()).collect()
}

/// F1 of two normalised answers' word multisets.
fn token_f1(given: &str, gold: &str) -> f64 {
    let given: Vec<&str> = given.split_whitespace().collect();
    let gold: Vec<&str> = gold.split_whitespace().collect();
    if given.is_empty() || gold.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for w in &gold {
        *counts.entry(w).or_default() += 1;
    }
    let mut common = 0usize;
    for w in &given {
        if let Some(n) = counts.get_mut(w)
            && *n > 0
        {
            *n -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / given.len() as f64;
    let recall = common as f64 / gold.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn normalising() {
        assert_eq!(qa_normalise("The  Eiffel Tower!"), "eiffel tower");
        assert_eq!(qa_normalise("An apple, a day."), "apple day");
        assert_eq!(qa_normalise("Theatre"), "theatre", "only whole words");
        assert_eq!(qa_normalise("“Hamlet”"), "hamlet");
        assert_eq!(qa_normalise("state-of-the-art"), "state of art");
        assert_eq!(qa_normalise("  \t\n "), "");
        assert_eq!(qa_normalise("ÉCOLE"), "école");
    }

    #[test]
    fn exact_match_over_alternatives() {
        assert!(qa_exact_match("the Eiffel Tower.", "Eiffel Tower"));
        assert!(qa_exact_match("Paris", "London | Paris"));
        assert!(qa_exact_match("paris", r#"["London", "Paris"]"#));
        assert!(qa_exact_match("1889", "[1889]"));
        assert!(!qa_exact_match("Paris, France", "Paris"));
        assert!(
            !qa_exact_match("", "the"),
            "an empty answer matches nothing"
        );
        assert!(!qa_exact_match("the", "a"));
        assert!(
            qa_exact_match("x y", "[\"x|y\"]"),
            "inside a JSON list a bar is text"
        );
        assert!(
            !qa_exact_match("x y", "x|y"),
            "outside one it separates answers"
        );
    }

    #[test]
    fn f1_by_hand() {
        // given {barack, obama}, gold {barack, hussein, obama}: p = 2/2, r = 2/3, F1 = 0.8.
        assert!(close(qa_f1("Barack Obama", "Barack Hussein Obama"), 0.8));
        // given {new, york, city}, gold {new, york}: p = 2/3, r = 1, F1 = 0.8.
        assert!(close(qa_f1("New York City", "New York"), 0.8));
        // given {paris, france}, gold {paris}: p = 1/2, r = 1, F1 = 2/3.
        assert!(close(qa_f1("Paris, France", "Paris"), 2.0 / 3.0));
        // Repeated words count once per occurrence: given {a1, a1}, gold {a1}: p = 1/2, r = 1.
        assert!(close(qa_f1("x x", "x"), 2.0 / 3.0));
        assert!(close(qa_f1("London", "Paris"), 0.0));
        assert!(close(qa_f1("Berlin", "Paris|New York|Berlin"), 1.0));
        assert!(close(qa_f1("New Jersey", "Paris | New York"), 0.5));
        assert!(
            close(qa_f1("the", "the"), 0.0),
            "nothing left after articles"
        );
        assert!(close(qa_f1("", "Paris"), 0.0));
    }
}
