//! From a written math answer to the bare text the evaluator reads: LaTeX decoration that does
//! not change a value (dollars, `\left`/`\right`, thin spaces, percent and degree signs,
//! `\text{}` wrappers, whitespace) goes; the fraction commands become one `\frac`, and the
//! multiplication and division symbols their ASCII operators.
//!
//! Works on any text: unbalanced braces stay as they are (the evaluator then refuses them), and
//! everything is linear in the input (matching braces are found once, up front), so a hostile
//! answer cannot make it slow.

/// Commands whose argument is kept and whose braces are dropped.
const WRAPPERS: &[&str] = &[
    "text",
    "textrm",
    "textbf",
    "textit",
    "mathrm",
    "mathbf",
    "mbox",
    "operatorname",
];

/// Commands that only size or space things.
const DROPPED: &[&str] = &[
    "left",
    "right",
    "displaystyle",
    "circ",
    "big",
    "Big",
    "bigl",
    "bigr",
    "Bigl",
    "Bigr",
    "quad",
    "qquad",
];

/// The cleaned form of `text` (see the module documentation).
pub(super) fn clean(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let closing = matching_braces(&chars);
    // Closing braces of wrappers already unwrapped.
    let mut skip = vec![false; chars.len()];
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if skip[i] {
            i += 1;
            continue;
        }
        match chars[i] {
            '\\' => i = command(&chars, i, &closing, &mut skip, &mut out),
            '^' => match degree_sign_end(&chars, i + 1) {
                Some(end) => i = end,
                None => {
                    out.push('^');
                    i += 1;
                }
            },
            '$' | '%' | '°' => i += 1,
            c if c.is_whitespace() => i += 1,
            '\u{2212}' => {
                out.push('-');
                i += 1;
            }
            '×' | '·' => {
                out.push('*');
                i += 1;
            }
            '÷' => {
                out.push('/');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    // `1{,}000`: LaTeX's way of writing a thousands separator.
    out.replace("{,}", ",")
}

/// Handles the command starting at `chars[at] == '\\'`; returns where scanning goes on.
fn command(
    chars: &[char],
    at: usize,
    closing: &[Option<usize>],
    skip: &mut [bool],
    out: &mut String,
) -> usize {
    let start = at + 1;
    let end = start
        + chars[start..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
    if end == start {
        // A control symbol: `\,` `\!` `\;` `\:` `\ ` are spacing, `\%` a percent sign.
        return match chars.get(start) {
            Some(',' | '!' | ';' | ':' | ' ' | '%') => start + 1,
            Some(&other) => {
                out.push('\\');
                out.push(other);
                start + 1
            }
            None => start,
        };
    }
    let name: String = chars[start..end].iter().collect();
    match name.as_str() {
        n if DROPPED.contains(&n) => {}
        "frac" | "dfrac" | "tfrac" => out.push_str("\\frac"),
        "cdot" | "times" => out.push('*'),
        "div" => out.push('/'),
        n if WRAPPERS.contains(&n) => {
            let brace = end
                + chars[end..]
                    .iter()
                    .take_while(|c| c.is_whitespace())
                    .count();
            if let Some(Some(close)) = closing.get(brace) {
                skip[*close] = true;
                return brace + 1;
            }
        }
        _ => {
            out.push('\\');
            out.push_str(&name);
        }
    }
    end
}

/// For each `{`, the index of its matching `}` (escaped braces `\{` `\}` are not counted).
fn matching_braces(chars: &[char]) -> Vec<Option<usize>> {
    let mut closing = vec![None; chars.len()];
    let mut open = Vec::new();
    for (i, &c) in chars.iter().enumerate() {
        let escaped = i > 0 && chars[i - 1] == '\\';
        match c {
            '{' if !escaped => open.push(i),
            '}' if !escaped => {
                if let Some(o) = open.pop() {
                    closing[o] = Some(i);
                }
            }
            _ => {}
        }
    }
    closing
}

/// When `chars[from..]` is a degree sign after `^` (`\circ` or `{\circ}`), where it ends.
fn degree_sign_end(chars: &[char], from: usize) -> Option<usize> {
    let skip_space = |mut i: usize| {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        i
    };
    let circ = |i: usize| {
        let word: Vec<char> = "\\circ".chars().collect();
        let end = i + word.len();
        (chars.get(i..end) == Some(&word[..])
            && !chars.get(end).is_some_and(|c| c.is_ascii_alphabetic()))
        .then_some(end)
    };
    let i = skip_space(from);
    if let Some(end) = circ(i) {
        return Some(end);
    }
    if chars.get(i) == Some(&'{') {
        let end = skip_space(circ(skip_space(i + 1))?);
        return (chars.get(end) == Some(&'}')).then_some(end + 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn decoration_goes_and_operators_stay() {
        assert_eq!(clean("$\\dfrac{1}{2}$"), "\\frac{1}{2}");
        assert_eq!(clean("\\left( 1, 2 \\right)"), "(1,2)");
        assert_eq!(clean("50\\%"), "50");
        assert_eq!(clean("90^\\circ"), "90");
        assert_eq!(clean("90^{\\circ}"), "90");
        assert_eq!(clean("90°"), "90");
        assert_eq!(clean("3 \\cdot 4 \\times 5 \\div 6"), "3*4*5/6");
        assert_eq!(clean("1\\,000\\!"), "1000");
        assert_eq!(clean("\\text{ NAEM }"), "NAEM");
        assert_eq!(clean("5\\text{ cm}"), "5cm");
        assert_eq!(clean("1{,}000"), "1,000");
        assert_eq!(clean("\u{2212}3"), "-3");
        assert_eq!(
            clean("\\leftarrow"),
            "\\leftarrow",
            "only the whole command"
        );
        assert_eq!(clean("x^2"), "x^2");
    }

    #[test]
    fn broken_text_is_left_for_the_evaluator() {
        assert_eq!(
            clean("\\text{abc"),
            "{abc",
            "an unclosed wrapper drops only its name"
        );
        assert_eq!(clean("\\frac{1}{2"), "\\frac{1}{2");
        assert_eq!(clean("\\"), "");
        assert_eq!(clean("^{\\circ"), "^{");
        assert_eq!(clean("é \\ü"), "é\\ü");
    }
}
