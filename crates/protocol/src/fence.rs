//! Markdown code fences inside a block: the program of a `<code>` call, its optional ```` ```sh ````
//! stdin, and the program of a code-profile answer.

/// One fenced block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced<'a> {
    /// The info string after the backticks, trimmed (`py`, `python`, `sh`, or empty).
    pub lang: &'a str,
    /// The lines between the fence markers, each with its newline.
    pub body: &'a str,
    /// Whether a closing marker was found (an unclosed fence runs to the end of the text).
    pub closed: bool,
}

/// Every fenced block in `text`, in order. A fence opens with three or more backticks at the start
/// of a line (after optional indentation) and closes at a line holding at least as many backticks
/// and nothing else.
pub fn fenced_blocks(text: &str) -> Vec<Fenced<'_>> {
    let mut found = Vec::new();
    let mut lines = LineIter { text, pos: 0 };
    while let Some((_, line)) = lines.next() {
        let trimmed = line.trim_start();
        let run = trimmed.bytes().take_while(|b| *b == b'`').count();
        if run < 3 {
            continue;
        }
        let lang = trimmed[run..].trim();
        if lang.contains('`') {
            continue; // inline code like ```a``` is not a fence
        }
        let body_start = lines.pos;
        let mut closed_at = None;
        for (start, line) in lines.by_ref() {
            let t = line.trim();
            if t.len() >= run && t.bytes().all(|b| b == b'`') {
                closed_at = Some(start);
                break;
            }
        }
        let body_end = closed_at.unwrap_or(text.len());
        found.push(Fenced {
            lang,
            body: &text[body_start.min(body_end)..body_end],
            closed: closed_at.is_some(),
        });
    }
    found
}

/// The program of a `<code>` call: the first fence tagged `py`/`python` (or untagged), and the
/// text of the first ```` ```sh ```` fence after it as the program's standard input.
pub fn program_and_stdin(text: &str) -> Option<(&str, Option<&str>)> {
    let blocks = fenced_blocks(text);
    let index = blocks.iter().position(|b| is_python(b.lang))?;
    let stdin = blocks[index + 1..]
        .iter()
        .find(|b| b.lang.eq_ignore_ascii_case("sh") || b.lang.eq_ignore_ascii_case("bash"))
        .map(|b| b.body);
    Some((blocks[index].body, stdin))
}

/// Whether a fence's info string marks a Python program (`py`, `python`, or none).
pub fn is_python(lang: &str) -> bool {
    lang.is_empty() || lang.eq_ignore_ascii_case("py") || lang.eq_ignore_ascii_case("python")
}

/// Lines with their start offsets; each line includes its `\n` except the last.
struct LineIter<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Iterator for LineIter<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        let rest = &self.text[start..];
        let len = rest.find('\n').map_or(rest.len(), |i| i + 1);
        self.pos += len;
        Some((start, &rest[..len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_program_and_stdin() {
        let text = "\n```py\nimport sys\nprint(sys.stdin.read())\n```\n```sh\n3 4\n```\n";
        let (program, stdin) = program_and_stdin(text).unwrap();
        assert_eq!(program, "import sys\nprint(sys.stdin.read())\n");
        assert_eq!(stdin, Some("3 4\n"));
    }

    #[test]
    fn python_and_untagged_fences_count() {
        assert_eq!(program_and_stdin("```python\nx=1\n```").unwrap().0, "x=1\n");
        assert_eq!(program_and_stdin("```\nx=2\n```").unwrap().0, "x=2\n");
        assert_eq!(program_and_stdin("```sh\nls\n```"), None);
        assert_eq!(program_and_stdin("print(1)"), None);
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        let blocks = fenced_blocks("```py\nprint(1)\n");
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].body, "print(1)\n");
        assert!(!blocks[0].closed);
    }

    #[test]
    fn indented_and_longer_fences() {
        let blocks = fenced_blocks("  ````py\n```\ninner\n```\n````\n");
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].body, "```\ninner\n```\n");
    }

    #[test]
    fn empty_program() {
        let (program, _) = program_and_stdin("```py\n```").unwrap();
        assert_eq!(program, "");
    }
}
