//! HTML with its element nesting bounded, before a tree is built from it.
//!
//! html5ever's tree builder does work in proportion to the number of open elements for most
//! tags (scope checks walk its stack of open elements, and formatting elements closed early are
//! opened again before each text), and html2text renders each nested block into a buffer of its
//! own and indents every line of it, so a page of 80,000 nested `<div>`s costs minutes, and 128
//! nested quotes around a megabyte of text make a hundred megabytes of indentation. Browsers cap
//! the depth of the tree they build for the same reason (Blink at 512).
//!
//! This pass reads the page with html5ever's tokenizer, which is linear, and follows the tree
//! builder's stack of open elements closely enough never to count fewer than it holds: the
//! implied closes it mirrors (`<li>` closing the item before it, a block closing an open `<p>`,
//! a cell the cell before it) stop where the tree builder's own would, and an end tag closes
//! only what the tree builder's would. Start tags that would open an element deeper than
//! [`MAX_DEPTH`], indent deeper than [`MAX_INDENT`] or keep more than [`MAX_FORMATTING`]
//! formatting elements open are dropped with their end tags; their text stays, in order. A page
//! that never goes that deep is handed on byte for byte as it came, so its text is exactly what
//! it was before.

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

/// Open elements kept at most. Real pages stay far below (deep component trees reach a few
/// dozen).
pub const MAX_DEPTH: usize = 128;
/// Open lists, list items, quotes and definitions kept at most: html2text indents each by two
/// columns of the 120 it wraps at, and past the width every character takes a line of
/// indentation (128 quotes around a megabyte of text made a hundred megabytes). Six levels of
/// nested lists, as in a long table of contents, take twelve.
pub const MAX_INDENT: usize = 32;
/// Formatting elements (`<b>`, `<font>`, `<a>`) left unclosed at most: the tree builder opens
/// all of them again before each run of text, however deep they were closed.
pub const MAX_FORMATTING: usize = 64;

/// How far down the stack an implied close or an end tag looks for its element; past it, the
/// element is taken to stay open (counting more than the tree builder holds is the safe side).
const REACH: usize = 32;

/// Bytes fed to the tokenizer at a time (a tendril holds at most 4 GiB).
const FEED_BYTES: usize = 1 << 20;

/// Elements that never hold children, so they open nothing.
const VOID: &[&str] = &[
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "img", "input",
    "keygen", "link", "meta", "param", "source", "track", "wbr",
];

/// The HTML standard's "special" elements: an end tag for an ordinary element stops at one, and
/// so does `<li>`'s search for the item it closes.
const SPECIAL: &[&str] = &[
    "address",
    "applet",
    "area",
    "article",
    "aside",
    "base",
    "basefont",
    "bgsound",
    "blockquote",
    "body",
    "br",
    "button",
    "caption",
    "center",
    "col",
    "colgroup",
    "dd",
    "details",
    "dir",
    "div",
    "dl",
    "dt",
    "embed",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hgroup",
    "hr",
    "html",
    "iframe",
    "img",
    "input",
    "keygen",
    "li",
    "link",
    "listing",
    "main",
    "marquee",
    "menu",
    "meta",
    "nav",
    "noembed",
    "noframes",
    "noscript",
    "object",
    "ol",
    "p",
    "param",
    "plaintext",
    "pre",
    "script",
    "search",
    "section",
    "select",
    "source",
    "style",
    "summary",
    "table",
    "tbody",
    "td",
    "template",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "track",
    "ul",
    "wbr",
    "xmp",
    "mi",
    "mo",
    "mn",
    "ms",
    "mtext",
    "annotation-xml",
    "foreignObject",
    "desc",
];

/// Where "has an element in scope" stops looking (the standard's default scope).
const SCOPE: &[&str] = &[
    "applet",
    "caption",
    "html",
    "table",
    "td",
    "th",
    "marquee",
    "object",
    "template",
    "mi",
    "mo",
    "mn",
    "ms",
    "mtext",
    "annotation-xml",
    "foreignObject",
    "desc",
    "title",
];

/// Where a table's parts look for the part they close.
const TABLE_SCOPE: &[&str] = &["html", "table", "template"];

/// Start tags that close an open `<p>` first ("close a p element" in the standard).
const CLOSES_P: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "header",
    "hgroup",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "search",
    "section",
    "summary",
    "ul",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "listing",
    "form",
    "li",
    "dd",
    "dt",
    "plaintext",
    "table",
    "xmp",
];

const HEADINGS: &[&str] = &["h1", "h2", "h3", "h4", "h5", "h6"];

/// Elements html2text indents their content by (a list inside a list indents even without an
/// item around it).
const INDENTS: &[&str] = &["blockquote", "li", "dd", "dl", "ul", "ol", "menu", "dir"];

/// Formatting elements: the tree builder keeps them in its list of active formatting elements.
const FORMATTING: &[&str] = &[
    "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
];

/// `html` with no element nested deeper than [`MAX_DEPTH`]: the bytes themselves when none is,
/// else the page written again without the start and end tags of the elements beyond.
pub fn bounded(html: &[u8]) -> Cow<'_, [u8]> {
    let text = String::from_utf8_lossy(html);
    let tokenizer = Tokenizer::new(Rewriter::default(), TokenizerOpts::default());
    let queue = BufferQueue::default();
    let mut rest: &str = &text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(FEED_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (chunk, after) = rest.split_at(cut);
        queue.push_back(StrTendril::from_slice(chunk));
        // The sink never asks the tokenizer to stop for a script, so a feed reads the queue out.
        let _ = tokenizer.feed(&queue);
        rest = after;
    }
    tokenizer.end();
    let state = tokenizer.sink.state.take();
    if state.dropped == 0 {
        Cow::Borrowed(html)
    } else {
        Cow::Owned(state.out.into_bytes())
    }
}

#[derive(Default)]
struct Rewriter {
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    /// The page written again, token by token.
    out: String,
    /// Names of the elements open, outermost first (never more than [`MAX_DEPTH`]).
    open: Vec<String>,
    /// Of those, the ones html2text indents by ([`INDENTS`]).
    indent: usize,
    /// Formatting start tags kept whose end tags have not come yet, by name, and in all: the
    /// tree builder keeps them active until their end tag, even once closed by another's.
    active: HashMap<String, usize>,
    formatting: usize,
    /// Start tags dropped whose end tags have not come yet, by name.
    pending: HashMap<String, usize>,
    /// Start tags dropped in all.
    dropped: u64,
    /// Open `<svg>` and `<math>` elements: inside them `<style>` and `<title>` hold markup.
    foreign: usize,
    /// The element whose text the tokenizer is reading raw (`<script>`, `<style>`, `<title>`),
    /// and whether character references count in it (`<title>`, `<textarea>`): its end tag
    /// always goes through, or the rest of the page would read as script.
    raw: Option<(String, bool)>,
}

impl TokenSink for Rewriter {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut state = self.state.borrow_mut();
        match token {
            Token::TagToken(tag) => match tag.kind {
                TagKind::StartTag => return state.start(&tag),
                TagKind::EndTag => state.end(&tag),
            },
            Token::CharacterTokens(text) => state.text(&text),
            Token::DoctypeToken(doctype) => {
                state.out.push_str("<!DOCTYPE");
                if let Some(name) = &doctype.name {
                    state.out.push(' ');
                    state.out.push_str(name);
                }
                if let Some(public) = &doctype.public_id {
                    state.out.push_str(" PUBLIC \"");
                    state.out.push_str(public);
                    state.out.push('"');
                }
                if let Some(system) = &doctype.system_id {
                    if doctype.public_id.is_none() {
                        state.out.push_str(" SYSTEM");
                    }
                    state.out.push_str(" \"");
                    state.out.push_str(system);
                    state.out.push('"');
                }
                state.out.push('>');
            }
            // Comments and NUL characters show as nothing; errors and the end need no mark.
            Token::CommentToken(_)
            | Token::NullCharacterToken
            | Token::EOFToken
            | Token::ParseError(_) => {}
        }
        TokenSinkResult::Continue
    }
}

/// How the tokenizer reads the text of an element that holds no markup (as html2text's parser
/// does, scripting off: `<noscript>` holds markup). `None` for `<plaintext>`, which holds the
/// rest of the page.
fn raw_kind(name: &str) -> Option<Option<RawKind>> {
    Some(match name {
        "title" | "textarea" => Some(RawKind::Rcdata),
        "style" | "xmp" | "iframe" | "noembed" | "noframes" => Some(RawKind::Rawtext),
        "script" => Some(RawKind::ScriptData),
        "plaintext" => None,
        _ => return None,
    })
}

impl State {
    fn start(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        let raw = if self.foreign == 0 {
            raw_kind(name)
        } else {
            None
        };
        if let Some(kind) = raw {
            // Raw text holds no tags, so it opens nothing deeper: always kept.
            self.raw = Some((name.to_string(), kind == Some(RawKind::Rcdata)));
            self.write_start(tag);
            return match kind {
                Some(kind) => TokenSinkResult::RawData(kind),
                None => TokenSinkResult::Plaintext,
            };
        }
        // `<div/>` opens a div all the same; only inside SVG and MathML does `/>` close.
        let closed_at_once = VOID.contains(&name) || (tag.self_closing && self.foreign > 0);
        if closed_at_once {
            self.write_start(tag);
            return TokenSinkResult::Continue;
        }
        self.implied_closes(name);
        let formatting = FORMATTING.contains(&name);
        if matches!(name, "a" | "nobr") {
            // A new link ends the one still active (the tree builder's adoption agency).
            self.forget_active(name);
        }
        let indents = INDENTS.contains(&name);
        if self.open.len() >= MAX_DEPTH
            || (indents && self.indent >= MAX_INDENT)
            || (formatting && self.formatting >= MAX_FORMATTING)
        {
            *self.pending.entry(name.to_string()).or_default() += 1;
            self.dropped += 1;
            return TokenSinkResult::Continue;
        }
        if matches!(name, "svg" | "math") {
            self.foreign += 1;
        }
        self.indent += usize::from(indents);
        if formatting {
            *self.active.entry(name.to_string()).or_default() += 1;
            self.formatting += 1;
        }
        self.open.push(name.to_string());
        self.write_start(tag);
        TokenSinkResult::Continue
    }

    /// What opening `name` closes first, as the tree builder does it (in body and in tables).
    fn implied_closes(&mut self, name: &str) {
        if CLOSES_P.contains(&name) {
            self.close_in_scope(&["p"], &[SCOPE, &["button"]]);
        }
        match name {
            "li" => self.close_item(&["li"]),
            "dd" | "dt" => self.close_item(&["dd", "dt"]),
            "td" | "th" => self.close_in_scope(&["td", "th"], &[TABLE_SCOPE]),
            "tr" => self.close_in_scope(&["tr"], &[TABLE_SCOPE]),
            "thead" | "tbody" | "tfoot" => {
                self.close_in_scope(&["thead", "tbody", "tfoot"], &[TABLE_SCOPE]);
            }
            "option" => self.close_top(&["option"]),
            "optgroup" => {
                self.close_top(&["option"]);
                self.close_top(&["optgroup"]);
            }
            _ if HEADINGS.contains(&name) => self.close_top(HEADINGS),
            _ => {}
        }
    }

    fn end(&mut self, tag: &Tag) {
        let name: &str = &tag.name;
        if self.raw.as_ref().is_some_and(|(raw, _)| raw == name) {
            self.raw = None;
            self.write_end(name);
            return;
        }
        if let Some(pending) = self.pending.get_mut(name).filter(|n| **n > 0) {
            *pending -= 1;
            return;
        }
        if FORMATTING.contains(&name) {
            self.forget_active(name);
        }
        match name {
            "p" => self.close_in_scope(&["p"], &[SCOPE, &["button"]]),
            "li" => self.close_in_scope(&["li"], &[SCOPE, &["ol", "ul"]]),
            _ if HEADINGS.contains(&name) => self.close_in_scope(HEADINGS, &[SCOPE]),
            // The end of the body or the page closes nothing; `</br>` is a line break; a form
            // is taken out of the stack alone.
            "body" | "html" | "br" => {}
            "form" => self.close_top(&["form"]),
            _ if SPECIAL.contains(&name) => self.close_in_scope(&[name], &[SCOPE]),
            // An ordinary element (formatting ones included): up to the first special element.
            _ => self.close_in_scope(&[name], &[SPECIAL]),
        }
        // An end tag goes through whether it closed something here or not: the parser decides
        // what it means (`</p>` alone is an empty paragraph, `</br>` a line break).
        self.write_end(name);
    }

    /// Closes the nearest open element named in `names`, and all above it, unless an element
    /// named in `stops` (or [`REACH`]) comes first.
    fn close_in_scope(&mut self, names: &[&str], stops: &[&[&str]]) {
        for (depth, open) in self.open.iter().rev().enumerate().take(REACH) {
            if names.contains(&open.as_str()) {
                let at = self.open.len() - 1 - depth;
                self.close_from(at);
                return;
            }
            if stops.iter().any(|set| set.contains(&open.as_str())) {
                return;
            }
        }
    }

    /// `<li>`, `<dd>`, `<dt>`: close the item before, looking through ordinary elements and
    /// `<address>`, `<div>`, `<p>`, not through other special ones.
    fn close_item(&mut self, names: &[&str]) {
        for (depth, open) in self.open.iter().rev().enumerate().take(REACH) {
            if names.contains(&open.as_str()) {
                let at = self.open.len() - 1 - depth;
                self.close_from(at);
                return;
            }
            if SPECIAL.contains(&open.as_str()) && !matches!(open.as_str(), "address" | "div" | "p")
            {
                return;
            }
        }
    }

    /// Closes the current element when it is one of `names`.
    fn close_top(&mut self, names: &[&str]) {
        if self
            .open
            .last()
            .is_some_and(|top| names.contains(&top.as_str()))
        {
            self.close_from(self.open.len() - 1);
        }
    }

    /// Forgets the elements open from `at` up.
    fn close_from(&mut self, at: usize) {
        for closed in self.open.drain(at..) {
            let closed = closed.as_str();
            if matches!(closed, "svg" | "math") {
                self.foreign = self.foreign.saturating_sub(1);
            }
            if INDENTS.contains(&closed) {
                self.indent = self.indent.saturating_sub(1);
            }
        }
    }

    /// One active formatting element named `name` fewer, when one is.
    fn forget_active(&mut self, name: &str) {
        if let Some(count) = self.active.get_mut(name).filter(|n| **n > 0) {
            *count -= 1;
            self.formatting -= 1;
        }
    }

    fn text(&mut self, text: &str) {
        match &self.raw {
            Some((_, false)) => self.out.push_str(text),
            Some((_, true)) | None => escape_into(&mut self.out, text, false),
        }
    }

    fn write_start(&mut self, tag: &Tag) {
        self.out.push('<');
        self.out.push_str(&tag.name);
        for attr in &tag.attrs {
            self.out.push(' ');
            self.out.push_str(&attr.name.local);
            self.out.push_str("=\"");
            escape_into(&mut self.out, &attr.value, true);
            self.out.push('"');
        }
        self.out.push_str(if tag.self_closing { "/>" } else { ">" });
    }

    fn write_end(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }
}

/// `text` as HTML reads it back: `&` and `<` escaped, and `"` inside an attribute value.
fn escape_into(out: &mut String, text: &str, attribute: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '"' if attribute => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(html: &str) -> String {
        String::from_utf8(bounded(html.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn shallow_pages_pass_through_unchanged() {
        let page = "<!doctype html><html><head><title>A &amp; B</title><script>if (a < b) {}\
                    </script></head><body><ul><li>one<li>two</ul><p>x<p>y &lt; z</body></html>";
        assert!(matches!(bounded(page.as_bytes()), Cow::Borrowed(_)));
        // Unclosed list items and paragraphs do not pile up as depth.
        let items = "<ul>".to_string() + &"<li><p>item".repeat(10 * MAX_DEPTH) + "</ul>";
        assert!(matches!(bounded(items.as_bytes()), Cow::Borrowed(_)));
        let cells = "<table>".to_string() + &"<tr><td>a<td>b".repeat(10 * MAX_DEPTH);
        assert!(matches!(bounded(cells.as_bytes()), Cow::Borrowed(_)));
    }

    /// The deepest element of the tree html5ever builds from `html` (the elements above it, the
    /// document's own `<html>` and `<body>` included), and the most indenting elements above one.
    fn tree_depth(html: &str) -> (usize, usize) {
        let parsed = scraper::Html::parse_document(html);
        let mut deepest = (0, 0);
        for node in parsed.tree.root().descendants() {
            let names: Vec<String> = node
                .ancestors()
                .filter_map(|a| a.value().as_element().map(|e| e.name().to_string()))
                .collect();
            let indents = names
                .iter()
                .filter(|n| INDENTS.contains(&n.as_str()))
                .count();
            deepest = (deepest.0.max(names.len()), deepest.1.max(indents));
        }
        deepest
    }

    /// Tags that the tree builder nests however they are written (an end tag does not reach
    /// past a special element; an item does not close the one before past a `<section>`;
    /// formatting elements closed by a block are opened again at the next text) count as deep.
    #[test]
    fn nesting_the_tree_builder_keeps_counts() {
        let reopened: String = (0..4 * MAX_FORMATTING)
            .map(|i| format!("<div><b id={i}>x</div>"))
            .collect();
        for unit in [
            "<span><div></span>",
            "<li><section>",
            "<blockquote>",
            "<ul><li>",
            "<ol>",
            "<table><tr><td>",
            &reopened,
        ] {
            let page = unit.repeat((3 * MAX_DEPTH / unit.matches('<').count()).max(1)) + "text";
            let before = tree_depth(&page);
            assert!(
                before.0 > MAX_DEPTH + 8 || before.1 > MAX_INDENT + 8,
                "{unit}: {before:?}"
            );
            let out = rewritten(&page);
            let after = tree_depth(&out);
            // The tree builder adds `<html>`, `<body>` and a table's implied parts.
            assert!(
                after.0 <= 2 * MAX_DEPTH + MAX_FORMATTING && after.1 <= MAX_INDENT,
                "{unit}: {after:?}"
            );
            assert!(out.ends_with("text"), "{unit}: {out}");
        }
        let out = rewritten(&reopened);
        assert_eq!(out.matches("<b ").count(), MAX_FORMATTING);
        assert_eq!(out.matches("<div>").count(), 4 * MAX_FORMATTING);
    }

    #[test]
    fn deep_nesting_is_cut_and_its_text_kept() {
        let deep = "<div>".repeat(MAX_DEPTH + 50)
            + "<b title=\"a&quot;b\">deep &amp; &lt;text&gt;</b>"
            + &"</div>".repeat(MAX_DEPTH + 50)
            + "<p>after</p>";
        let out = rewritten(&deep);
        assert_eq!(out.matches("<div>").count(), MAX_DEPTH);
        assert_eq!(out.matches("</div>").count(), MAX_DEPTH);
        assert!(out.contains("deep &amp; &lt;text>"), "{out}");
        assert!(!out.contains("<b"), "{out}");
        assert!(out.ends_with("<p>after</p>"), "{out}");
        // Raw text past the limit stays raw, and its end tag is kept.
        let script = "<div>".repeat(MAX_DEPTH + 1) + "<script>a < b</script><p>shown";
        let out = rewritten(&script);
        assert!(out.contains("<script>a < b</script>shown"), "{out}");
        // What the tokenizer decoded is escaped again, attributes included.
        let attrs = "<span>".repeat(MAX_DEPTH - 1)
            + "<a href=\"x?a=1&amp;b=&quot;2&quot;\" title='it&apos;s'>t &lt; u</a>"
            + &"<i>".repeat(5);
        let out = rewritten(&attrs);
        assert!(
            out.ends_with("<a href=\"x?a=1&amp;b=&quot;2&quot;\" title=\"it's\">t &lt; u</a><i>"),
            "{out}"
        );
    }
}
