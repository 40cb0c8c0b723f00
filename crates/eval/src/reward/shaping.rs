//! Optional reward shaping of RL (PROTOCOL.md §6): the overlong penalty and the code format gate.

use catena_protocol::fence::{fenced_blocks, is_python};
use catena_protocol::{Tag, parse_all};

/// The soft overlong penalty for a response of `len` tokens under a budget of `max`:
/// `min(0, -(L - 7/8 Lmax) / (Lmax / 8))`, so nothing up to seven eighths of the budget, then
/// linearly down to -1 at the budget; clamped at -1 beyond it (a response can only be longer
/// than the budget when a caller counts differently, and the penalty must stay bounded), and 0
/// for a zero budget.
pub fn overlong_penalty(len: usize, max: usize) -> f64 {
    if max == 0 {
        return 0.0;
    }
    let (len, max) = (len as f64, max as f64);
    let penalty = -(len - 7.0 / 8.0 * max) / (max / 8.0);
    penalty.clamp(-1.0, 0.0)
}

/// The format gate: every `<code>` block holds one proper fence, a closed ```` ```python ````
/// (or ```` ```py ````, or untagged) block, optionally followed by the closed ```` ```sh ````
/// block the protocol allows as the program's stdin, and nothing else but whitespace.
pub fn code_format_ok(trajectory: &str) -> bool {
    let (blocks, _) = parse_all(trajectory);
    blocks
        .iter()
        .filter(|b| b.tag == Tag::Code)
        .all(|b| proper_fence(&b.content))
}

fn proper_fence(content: &str) -> bool {
    let fences = fenced_blocks(content);
    let is_stdin =
        |lang: &str| lang.eq_ignore_ascii_case("sh") || lang.eq_ignore_ascii_case("bash");
    let shape_ok = match fences.as_slice() {
        [program] => is_python(program.lang),
        [program, stdin] => is_python(program.lang) && is_stdin(stdin.lang),
        _ => false,
    };
    // Outside the fences only blank lines: every non-blank line is a fence marker (two a
    // closed fence) or inside a fence's body.
    let non_blank = |text: &str| text.lines().filter(|l| !l.trim().is_empty()).count();
    let inside: usize = fences.iter().map(|f| non_blank(f.body) + 2).sum();
    shape_ok && fences.iter().all(|f| f.closed) && non_blank(content) == inside
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlong_penalty_by_length() {
        assert_eq!(overlong_penalty(0, 1000), 0.0);
        assert_eq!(overlong_penalty(875, 1000), 0.0, "7/8 of the budget");
        assert_eq!(overlong_penalty(900, 1600), 0.0);
        assert_eq!(overlong_penalty(1500, 1600), -0.5, "15/16 of the budget");
        assert_eq!(overlong_penalty(1600, 1600), -1.0, "the whole budget");
        assert_eq!(
            overlong_penalty(5000, 1600),
            -1.0,
            "past the budget: clamped"
        );
        assert_eq!(overlong_penalty(usize::MAX, 8), -1.0);
        assert_eq!(overlong_penalty(10, 0), 0.0, "no budget, no penalty");
        assert!((overlong_penalty(1450, 1600) - -0.25).abs() < 1e-12);
    }

    #[test]
    fn code_blocks_must_be_one_proper_fence() {
        let ok = [
            "<code>\n```python\nprint(1)\n```\n</code>",
            "<code>\n```py\nprint(1)\n```\n</code>",
            "<code>```\nprint(1)\n```\n</code>",
            "<code>\n```py\nprint(input())\n```\n```sh\n3\n```\n</code>",
            "<plan>1.</plan><answer>\\boxed{1}</answer>",
            "no blocks at all",
        ];
        for t in ok {
            assert!(code_format_ok(t), "{t:?}");
        }
        let bad = [
            "<code>print(1)</code>",
            "<code>\n```python\nprint(1)\n</code>",
            "<code>Let me run:\n```python\nprint(1)\n```\n</code>",
            "<code>\n```python\nprint(1)\n```\nthat was it\n</code>",
            "<code>\n```python\nprint(1)\n```\n```python\nprint(2)\n```\n</code>",
            "<code>\n```js\nconsole.log(1)\n```\n</code>",
            "<code>```python print(1)```</code>",
            "<code></code>",
            "<code>\n```py\nprint(1)\n```\n</code><observation>1</observation><code>x = 1</code>",
        ];
        for t in bad {
            assert!(!code_format_ok(t), "{t:?}");
        }
    }
}
