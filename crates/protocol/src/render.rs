//! Writing trajectories: the inverse of the parser.

use super::tag::Tag;

/// `<tag>content</tag>`, exactly.
pub fn render_block(tag: Tag, content: &str) -> String {
    let mut out = String::with_capacity(content.len() + 2 * tag.name().len() + 5);
    out.push('<');
    out.push_str(tag.name());
    out.push('>');
    out.push_str(content);
    out.push_str("</");
    out.push_str(tag.name());
    out.push('>');
    out
}

/// The text the runtime appends after a tool call (PROTOCOL.md §2, step 3):
/// `"\n<observation>\n" + result + "\n</observation>\n\n"`. The SFT loss mask depends on the two
/// newlines after the closing tag.
pub fn render_observation(result: &str) -> String {
    format!("\n<observation>\n{result}\n</observation>\n\n")
}

/// Blocks joined by `separator`.
pub fn render_blocks<'a>(
    blocks: impl IntoIterator<Item = (Tag, &'a str)>,
    separator: &str,
) -> String {
    blocks
        .into_iter()
        .map(|(tag, content)| render_block(tag, content))
        .collect::<Vec<_>>()
        .join(separator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observation_has_the_exact_framing() {
        assert_eq!(
            render_observation("[EXECUTED] Code exited with status 0 (no output)."),
            "\n<observation>\n[EXECUTED] Code exited with status 0 (no output).\n</observation>\n\n"
        );
    }

    #[test]
    fn blocks_render_inline() {
        assert_eq!(render_block(Tag::Think, "x"), "<think>x</think>");
        assert_eq!(
            render_blocks([(Tag::Plan, "a"), (Tag::Answer, "b")], "\n"),
            "<plan>a</plan>\n<answer>b</answer>"
        );
    }
}
