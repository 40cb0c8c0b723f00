//! Extracting the final answer of a trajectory (PROTOCOL.md §2, steps 4 and 5).

use super::parser::Block;
use super::tag::Tag;

/// The content of the LAST properly closed `<answer>` block, trimmed.
pub fn final_answer(blocks: &[Block]) -> Option<&str> {
    last_closed(blocks, Tag::Answer)
}

/// The content of the last properly closed `<suggested_answer>` block: the answer when a budget ran
/// out before `<answer>`.
pub fn last_suggested_answer(blocks: &[Block]) -> Option<&str> {
    last_closed(blocks, Tag::SuggestedAnswer)
}

fn last_closed(blocks: &[Block], tag: Tag) -> Option<&str> {
    blocks
        .iter()
        .rev()
        .find(|b| b.tag == tag && b.closed)
        .map(|b| b.content.trim())
}

/// The contents of the last `\boxed{...}` in `text`, with nested braces balanced.
pub fn boxed(text: &str) -> Option<&str> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let mut depth = 1usize;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse_all;

    #[test]
    fn last_closed_answer_wins() {
        let (blocks, _) =
            parse_all("<answer>1</answer><think>no</think><answer> 2 </answer><answer>3");
        assert_eq!(final_answer(&blocks), Some("2"));
    }

    #[test]
    fn suggested_answer_fallback() {
        let (blocks, _) = parse_all("<suggested_answer>Paris</suggested_answer><double_check>");
        assert_eq!(final_answer(&blocks), None);
        assert_eq!(last_suggested_answer(&blocks), Some("Paris"));
    }

    #[test]
    fn boxed_contents() {
        assert_eq!(boxed("so \\boxed{\\frac{1}{2}}."), Some("\\frac{1}{2}"));
        assert_eq!(boxed("\\boxed{1} then \\boxed{2}"), Some("2"));
        assert_eq!(boxed("\\boxed{unclosed"), None);
        assert_eq!(boxed("none"), None);
    }
}
