//! Files to searchable documents: Markdown, plain text, HTML and PDF (its text layer), each with a
//! title, readable text and, where the file states one, a publication date; and the articles of
//! ZIM archives. The crawler reads fetched web pages through the same [`html_to_text`], so a page
//! reads the same whether it came from the index or from the network.
//!
//! Every byte read here is untrusted (the user's files, pages from the web, archives from
//! anywhere), so the readers bound what the bytes can make them do: an HTML page's nesting is
//! flattened past a depth before it is parsed, a PDF's streams are measured before they are
//! opened, and a parser's panic becomes the file's error. A crate of its own, apart from the
//! index (`catena-search`), so that the fuzz targets (`fuzz/`) build it without tantivy.

mod html_depth;
mod pdf;
mod pdf_fonts;
mod pdf_pages;
#[cfg(test)]
mod test_pdf;

use std::path::{Path, PathBuf};

/// The file name endings indexed as documents.
pub const DOCUMENT_EXTENSIONS: &[&str] = &[
    "md", "markdown", "txt", "text", "rst", "html", "htm", "xhtml", "pdf",
];

/// Files larger than this are not indexed (a document that big is a data dump, not something a
/// model reads).
pub const MAX_DOCUMENT_BYTES: u64 = 20 << 20;
/// PDFs larger than this are not indexed: a PDF carries fonts and images beside its text, so a
/// long book is this big.
pub const MAX_PDF_BYTES: u64 = 100 << 20;

/// Width the HTML renderer wraps lines at: wide, so sentences stay whole for the model.
const RENDER_WIDTH: usize = 120;

/// A document ready to index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// `file://` URL of the file: what search hits show and `<crawl_page>` opens again.
    pub url: String,
    pub title: String,
    pub text: String,
    /// As the file states it (`2024-05-01`), when it does.
    pub date: Option<String>,
}

/// How a file is read, by its name's ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Markdown,
    Text,
    Html,
    Pdf,
}

fn format_of(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" => Some(Format::Markdown),
        "txt" | "text" | "rst" => Some(Format::Text),
        "html" | "htm" | "xhtml" => Some(Format::Html),
        "pdf" => Some(Format::Pdf),
        _ => None,
    }
}

/// Whether `path`'s name ends like a document Catena indexes.
pub fn is_document(path: &Path) -> bool {
    format_of(path).is_some()
}

/// Reads the document at `path` (absolute, so its URL is). The error says why it is not one.
pub fn read_document(path: &Path) -> Result<Document, String> {
    let format = format_of(path).ok_or("not a Markdown, text, HTML or PDF file")?;
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    let limit = if format == Format::Pdf {
        MAX_PDF_BYTES
    } else {
        MAX_DOCUMENT_BYTES
    };
    if size > limit {
        return Err(format!("larger than {} MiB", limit >> 20));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let url = url::Url::from_file_path(path)
        .map_err(|()| "the path is not absolute".to_string())?
        .to_string();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (title, text, date) = match format {
        Format::Html => {
            let (meta, text) = html_page(&bytes);
            (meta.title, text, meta.date)
        }
        Format::Markdown => {
            let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text")?;
            markdown_parts(&text)
        }
        Format::Pdf => {
            let text = pdf_text(&bytes)?;
            (first_line_title(&text), text, None)
        }
        Format::Text => {
            let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text")?;
            (first_line_title(&text), text, None)
        }
    };
    if text.trim().is_empty() {
        return Err("no text".into());
    }
    Ok(Document {
        url,
        title: title.filter(|t| !t.trim().is_empty()).unwrap_or(stem),
        text,
        date,
    })
}

/// The first non-empty line, when it is short enough to be a title.
fn first_line_title(text: &str) -> Option<String> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    (first.chars().count() <= 100).then(|| first.to_string())
}

/// The text of a PDF, page after page; a PDF without a text layer (a scan) gives an error, and
/// so does one whose streams decompress past [`crate::pdf::PDF_CAPS`] (measured before they are
/// opened: a failed allocation would end the process). `pdf-extract` is known to panic on some
/// malformed files; such a panic is caught here and becomes the file's error, so one broken PDF
/// never ends a build.
pub fn pdf_text(bytes: &[u8]) -> Result<String, String> {
    let text = std::panic::catch_unwind(|| crate::pdf::pdf_text(bytes, crate::pdf::PDF_CAPS))
        .map_err(|_| "the PDF could not be parsed".to_string())??;
    // Pages come separated by form feeds; runs of blank lines from the layout are squeezed.
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.replace('\u{c}', "\n").lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    if out.trim().is_empty() {
        return Err("the PDF has no text layer (a scan?)".into());
    }
    Ok(out)
}

/// The documents and archives under `roots` (files, and folders walked without following links
/// or entering hidden folders), in a stable order.
pub fn document_files(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for root in roots {
        let walk = walkdir::WalkDir::new(root)
            .follow_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
        for entry in walk.filter_map(Result::ok) {
            let path = entry.path();
            if entry.file_type().is_file() && (is_document(path) || is_archive(path)) {
                files.push(entry.into_path());
            }
        }
    }
    files
}

/// HTML as readable text: paragraphs and headings as lines, links as numbered references with
/// their targets listed at the end (so a summary can name them), scripts and styles dropped.
/// Bytes that are not HTML give whatever text they hold; it never fails. Nesting past
/// [`crate::html_depth::MAX_DEPTH`] is flattened first, so time and memory grow with the page's
/// length, not with its depth.
pub fn html_to_text(html: &[u8]) -> String {
    render_text(&crate::html_depth::bounded(html))
}

/// A whole page read for both of its parts: [`html_metadata`] and [`html_to_text`], with the
/// nesting bounded once for the two.
pub fn html_page(html: &[u8]) -> (HtmlMetadata, String) {
    let html = crate::html_depth::bounded(html);
    (metadata_of(&html), render_text(&html))
}

/// [`html_to_text`] of HTML whose nesting is already bounded.
fn render_text(html: &[u8]) -> String {
    let rendered = html2text::config::plain()
        .no_table_borders()
        .no_link_wrapping()
        .allow_width_overflow()
        .string_from_read(html, RENDER_WIDTH);
    match rendered {
        Ok(text) => text,
        Err(_) => String::from_utf8_lossy(html).into_owned(),
    }
}

/// The ending of ZIM archives (Kiwix's offline Wikipedia, Stack Exchange and documentation
/// sites), indexed article by article.
pub const ARCHIVE_EXTENSION: &str = "zim";

/// Whether `path`'s name ends like a ZIM archive.
pub fn is_archive(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ARCHIVE_EXTENSION))
}

/// Where the articles of the archive at `path` live: `zim://{name}/`, `name` being the file's
/// name without `.zim`. An article's URL is this joined with its path, so the links inside it
/// resolve to other articles of the same archive.
pub fn archive_base(path: &Path) -> Result<url::Url, String> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if catena_protocol::names::is_plain_char(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    url::Url::parse(&format!("zim://{name}/")).map_err(|e| format!("{}: {e}", path.display()))
}

/// Progress through an archive: articles read of those it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveProgress {
    pub done: u64,
    pub total: u64,
}

/// The HTML articles of the ZIM archive at `path`, each given to `each` as a document with a
/// `zim://` URL (see [`archive_base`]). With `links`, the text ends with the article's links made
/// absolute (what `<crawl_page>` shows); without, it is prose only (what passages hold). An
/// article that cannot be read goes to `failed` with the reason, and reading goes on. Articles
/// are bounded as files are: one larger than [`MAX_DOCUMENT_BYTES`] is not read, the HTML of
/// the rest is converted as a page is (nesting bounded), and the reading ends with an error
/// when the archive has decompressed to its budget.
pub fn archive_documents(
    path: &Path,
    links: bool,
    each: &mut dyn FnMut(Document, ArchiveProgress),
    failed: &mut dyn FnMut(&str, String),
) -> Result<(), catena_zim::ZimError> {
    let mut archive = catena_zim::ZimArchive::open(path)?;
    let base = archive_base(path).map_err(|reason| catena_zim::ZimError::NotZim {
        path: path.to_path_buf(),
        reason,
    })?;
    let is_html = |mime: &str| mime.starts_with("text/html");
    let entries = archive.entries(is_html)?;
    let total = entries.len() as u64;
    let mut done = 0u64;
    catena_zim::read_entries(&mut archive, &entries, |entry, bytes| {
        done += 1;
        let progress = ArchiveProgress { done, total };
        let bytes = match bytes {
            Ok(bytes) if bytes.len() as u64 > MAX_DOCUMENT_BYTES => {
                return failed(
                    &entry.path,
                    format!("larger than {} MiB", MAX_DOCUMENT_BYTES >> 20),
                );
            }
            Ok(bytes) => bytes,
            Err(reason) => return failed(&entry.path, reason),
        };
        let Ok(url) = base.join(&entry.path) else {
            return failed(&entry.path, "its path is not a URL path".into());
        };
        let text = if links {
            absolute_links(&html_to_text(bytes), &url)
        } else {
            html_to_prose(bytes)
        };
        if text.trim().is_empty() {
            return failed(&entry.path, "no text".into());
        }
        let document = Document {
            url: url.to_string(),
            title: entry.title.clone(),
            text,
            date: None,
        };
        each(document, progress);
    })
}

/// HTML as prose: like [`html_to_text`] but without link markers or the list of link targets.
pub fn html_to_prose(html: &[u8]) -> String {
    let html = crate::html_depth::bounded(html);
    let rendered = html2text::config::plain_no_decorate()
        .no_table_borders()
        .link_footnotes(false)
        .allow_width_overflow()
        .string_from_read(&html[..], RENDER_WIDTH);
    match rendered {
        Ok(text) => text,
        Err(_) => String::from_utf8_lossy(&html).into_owned(),
    }
}

/// The rendered page's link list (`[3]: /tides.html` lines at its end) with every target made
/// absolute against the page's address, so a model can open a link it read.
pub fn absolute_links(text: &str, base: &url::Url) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let resolved = line
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("]: "))
            .filter(|(number, _)| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(number, target)| {
                let joined = base.join(target.trim_end()).ok()?;
                let end = if line.ends_with('\n') { "\n" } else { "" };
                Some(format!("[{number}]: {joined}{end}"))
            });
        match resolved {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
    }
    out
}

/// The text of an HTML fragment (a snippet with `<strong>` and `&amp;` in it), on one line.
pub fn html_fragment_text(fragment: &str) -> String {
    let fragment = crate::html_depth::bounded(fragment.as_bytes());
    let parsed = scraper::Html::parse_fragment(&String::from_utf8_lossy(&fragment));
    let text: String = parsed.root_element().text().collect();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What an HTML page says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HtmlMetadata {
    pub title: Option<String>,
    pub date: Option<String>,
}

/// The page's `<title>` (else its first `<h1>`) and publication date from the usual places:
/// `article:published_time`, `date`/`dc.date` meta tags, `datePublished`, `<time datetime>`.
/// Nesting is bounded as for [`html_to_text`] (the same parser builds the tree).
pub fn html_metadata(html: &[u8]) -> HtmlMetadata {
    metadata_of(&crate::html_depth::bounded(html))
}

/// [`html_metadata`] of HTML whose nesting is already bounded.
fn metadata_of(html: &[u8]) -> HtmlMetadata {
    let document = scraper::Html::parse_document(&String::from_utf8_lossy(html));
    let first_text = |selector: &str| {
        let selector = scraper::Selector::parse(selector).ok()?;
        let element = document.select(&selector).next()?;
        let text = element.text().collect::<String>();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        (!text.is_empty()).then_some(text)
    };
    let first_attr = |selector: &str, attr: &str| {
        let selector = scraper::Selector::parse(selector).ok()?;
        document
            .select(&selector)
            .filter_map(|e| e.value().attr(attr))
            .map(str::trim)
            .find(|v| !v.is_empty())
            .map(str::to_string)
    };
    let title = first_text("title").or_else(|| first_text("h1"));
    let date = [
        ("meta[property='article:published_time']", "content"),
        ("meta[name='date']", "content"),
        ("meta[name='dc.date']", "content"),
        ("meta[name='DC.date']", "content"),
        ("meta[itemprop='datePublished']", "content"),
        ("time[datetime]", "datetime"),
    ]
    .iter()
    .find_map(|(selector, attr)| first_attr(selector, attr))
    .map(|d| short_date(&d));
    HtmlMetadata { title, date }
}

/// `2024-05-01T10:00:00Z` → `2024-05-01`; anything else as written.
fn short_date(date: &str) -> String {
    let day = date.get(..10).unwrap_or(date);
    let is_day = day.len() == 10
        && day.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if is_day {
        day.to_string()
    } else {
        date.to_string()
    }
}

/// Title, body and date of a Markdown file: YAML front matter (`title:`, `date:`) when present,
/// else the first `# ` heading as the title.
fn markdown_parts(text: &str) -> (Option<String>, String, Option<String>) {
    let (front, body) = match text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---"))
    {
        Some((front, rest)) => (Some(front), rest.trim_start_matches(['-', '\n'])),
        None => (None, text),
    };
    let field = |name: &str| {
        front?.lines().find_map(|line| {
            let value = line.strip_prefix(name)?.strip_prefix(':')?.trim();
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            (!value.is_empty()).then(|| value.to_string())
        })
    };
    let heading = body
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(|h| h.trim().to_string());
    let date = field("date").map(|d| short_date(&d));
    (field("title").or(heading), body.to_string(), date)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_gives_title_date_text_and_links() {
        let html = br#"<html><head><title>The  Harbour
            Guide</title><meta property="article:published_time" content="2024-05-01T10:00:00Z">
            <script>var secret = 1;</script><style>p { color: red }</style></head>
            <body><h1>Boats</h1><p>Fishing boats leave <a href="/tides.html">before sunrise</a>.</p>
            </body></html>"#;
        let meta = html_metadata(html);
        assert_eq!(meta.title.as_deref(), Some("The Harbour Guide"));
        assert_eq!(meta.date.as_deref(), Some("2024-05-01"));
        let text = html_to_text(html);
        assert!(text.contains("Fishing boats leave"), "{text}");
        assert!(text.contains("/tides.html"), "{text}");
        assert!(
            !text.contains("secret") && !text.contains("color"),
            "{text}"
        );
    }

    #[test]
    fn links_become_absolute() {
        let base = url::Url::parse("http://example.org/dir/page.html").unwrap();
        let text = "See [tides][1].\n\n[1]: ../tides.html\n[2]: https://x.org/a\n[x]: y\n";
        assert_eq!(
            absolute_links(text, &base),
            "See [tides][1].\n\n[1]: http://example.org/tides.html\n[2]: https://x.org/a\n[x]: y\n"
        );
    }

    #[test]
    fn hostile_html_does_not_crash() {
        let deep = "<div>".repeat(20_000) + "deep text";
        assert!(html_to_text(deep.as_bytes()).contains("deep text"));
        let _ = html_to_text(b"\xff\xfe<p>\x00binary</p><<<>>>");
        assert_eq!(html_metadata(b"\xff<title>").title, None);
    }

    /// Runs `work` on a thread and waits for it at most `seconds`: `None` if it is still
    /// running (it is left to finish on its own).
    fn within<T: Send + 'static>(
        seconds: u64,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(work());
        });
        result
            .recv_timeout(std::time::Duration::from_secs(seconds))
            .ok()
    }

    #[test]
    fn deep_nesting_is_converted_in_bounded_time() {
        // The attack's shapes, each well past the depth kept: 200,000 nested elements took
        // minutes and gigabytes (80,000 `<div>`s 44 s); each now takes well under a second.
        for (open, close) in [
            ("<div>", "</div>"),
            ("<blockquote><ul><li>", "</li></ul></blockquote>"),
            ("<table><tr><td>", "</td></tr></table>"),
            ("<b><i>", "</i></b>"),
        ] {
            let page = format!(
                "<title>Deep</title>{}<p>deep text</p>{}<p>after</p>",
                open.repeat(200_000 / open.matches('<').count()),
                close.repeat(200_000 / open.matches('<').count()),
            );
            let converted = within(30, move || {
                let page = page.as_bytes();
                (html_to_text(page), html_to_prose(page), html_metadata(page))
            });
            let (text, prose, meta) =
                converted.unwrap_or_else(|| panic!("{open}: still running after 30 s"));
            for out in [&text, &prose] {
                assert!(out.contains("deep text") && out.contains("after"), "{open}");
                assert!(out.len() < 1 << 20, "{open}: {} bytes", out.len());
            }
            assert_eq!(meta.title.as_deref(), Some("Deep"));
        }
    }

    #[test]
    fn pages_within_the_depth_read_exactly_as_before() {
        // The pre-pass hands a page that never goes deep on untouched: html2text's own text.
        let page = br#"<html><head><title>Harbour</title></head><body><div><ul><li>Tides
            <li>Boats <a href="/b.html">list</a></ul><table><tr><td>06:52<td>north pier</table>
            <blockquote><p>Leave early.<p>Come back &amp; rest.</blockquote></div></body></html>"#;
        let direct = html2text::config::plain()
            .no_table_borders()
            .no_link_wrapping()
            .allow_width_overflow()
            .string_from_read(&page[..], RENDER_WIDTH)
            .unwrap();
        assert_eq!(html_to_text(page), direct);
        let nested = "<div>".repeat(crate::html_depth::MAX_DEPTH - 1) + "<p>inside</p>";
        let direct = html2text::config::plain()
            .no_table_borders()
            .no_link_wrapping()
            .allow_width_overflow()
            .string_from_read(nested.as_bytes(), RENDER_WIDTH)
            .unwrap();
        assert_eq!(html_to_text(nested.as_bytes()), direct);
    }

    #[test]
    fn markdown_front_matter_and_headings() {
        let (title, body, date) =
            markdown_parts("---\ntitle: \"Tides\"\ndate: 2023-02-03\n---\n# Other\nText.\n");
        assert_eq!(title.as_deref(), Some("Tides"));
        assert_eq!(date.as_deref(), Some("2023-02-03"));
        assert!(body.starts_with("# Other"), "{body}");
        let (title, _, date) = markdown_parts("Intro\n# Heading One\nmore");
        assert_eq!((title.as_deref(), date), (Some("Heading One"), None));
    }

    /// A one-page PDF written by hand: the text in Helvetica, one line per entry of `lines`.
    fn pdf_with(lines: &[&str]) -> Vec<u8> {
        let mut content = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
        for line in lines {
            content.push_str(&format!("({line}) Tj T*\n"));
        }
        content.push_str("ET");
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
             /Resources << /Font << /F1 5 0 R >> >> >>"
                .to_string(),
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len()
            ),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
                .to_string(),
        ];
        crate::test_pdf::pdf_of(&objects)
    }

    #[test]
    fn pdfs_give_their_text_and_broken_ones_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let pdf = root.join("tides.pdf");
        std::fs::write(
            &pdf,
            pdf_with(&[
                "Tide tables",
                "High water at the north pier comes at 06:52.",
            ]),
        )
        .unwrap();
        let document = read_document(&pdf).unwrap();
        assert_eq!(document.title, "Tide tables");
        assert!(
            document.text.contains("north pier comes at 06:52"),
            "{document:?}"
        );
        let bytes = std::fs::read(&pdf).unwrap();
        for (name, broken) in [
            ("cut.pdf", bytes[..bytes.len() / 2].to_vec()),
            (
                "garbage.pdf",
                b"%PDF-1.4\n\x00\xff garbage obj << /Type".to_vec(),
            ),
            ("empty.pdf", pdf_with(&[])),
        ] {
            let file = root.join(name);
            std::fs::write(&file, broken).unwrap();
            let err = read_document(&file).unwrap_err();
            assert!(err.contains("PDF"), "{name}: {err}");
        }
    }

    /// A one-page PDF with the given streams, each `(filters, bytes)`; its page draws the first
    /// `drawn` of them in turn (the rest are objects nothing uses).
    fn pdf_with_streams(streams: &[(&str, Vec<u8>)], drawn: usize) -> Vec<u8> {
        let first = 5;
        let contents: Vec<String> = (0..drawn).map(|i| format!("{} 0 R", first + i)).collect();
        let mut objects: Vec<Vec<u8>> = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [{}] \
                 /Resources << /Font << /F1 4 0 R >> >> >>",
                contents.join(" ")
            )
            .into_bytes(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
                .to_vec(),
        ];
        for (filters, bytes) in streams {
            let mut object =
                format!("<< /Length {} {filters} >>\nstream\n", bytes.len()).into_bytes();
            object.extend_from_slice(bytes);
            object.extend_from_slice(b"\nendstream");
            objects.push(object);
        }
        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, object) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
            pdf.extend_from_slice(object);
            pdf.extend_from_slice(b"\nendobj\n");
        }
        let xref = pdf.len();
        pdf.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
        );
        for offset in offsets {
            pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
        }
        pdf.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        pdf
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_pdf_inflate_bomb_is_refused_before_it_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let text = b"BT /F1 12 Tf 72 720 Td (Harbour notes) Tj ET".to_vec();
        // Deflated twice, 200 MiB of zeros take a few kilobytes: past the cap of one stream.
        let zeros = vec![0u8; 200 << 20];
        let bomb = deflate(&deflate(&zeros));
        let file = root.join("bomb.pdf");
        std::fs::write(
            &file,
            pdf_with_streams(
                &[
                    ("", text.clone()),
                    ("/Filter [/FlateDecode /FlateDecode]", bomb),
                ],
                2,
            ),
        )
        .unwrap();
        assert!(std::fs::metadata(&file).unwrap().len() < 64 << 10);
        let err = read_document(&file).unwrap_err();
        assert!(
            err.contains("decompress to more than 128 MiB each"),
            "{err}"
        );
        // The same text with a stream of ordinary size reads.
        let fine = root.join("fine.pdf");
        std::fs::write(
            &fine,
            pdf_with_streams(
                &[
                    ("/Filter /FlateDecode", deflate(&text)),
                    ("/Filter /FlateDecode", deflate(&[b' '; 1000])),
                ],
                2,
            ),
        )
        .unwrap();
        assert!(read_document(&fine).unwrap().text.contains("Harbour notes"));
    }

    #[test]
    fn pdf_streams_are_capped_in_all_and_per_page() {
        let caps = crate::pdf::PdfCaps {
            stream: 1 << 20,
            total: 3 << 20,
        };
        let text = b"BT /F1 12 Tf 72 720 Td (Harbour notes) Tj ET".to_vec();
        let spaces = deflate(&vec![b' '; 900 << 10]);
        let padded = |n: usize| {
            let mut streams = vec![("", text.clone())];
            streams.extend((0..n).map(|_| ("/Filter /FlateDecode", spaces.clone())));
            pdf_with_streams(&streams, 1)
        };
        // One such stream fits, and so do three; five do not, in all (used or not).
        for (n, fits) in [(1, true), (3, true), (5, false)] {
            let read = crate::pdf::pdf_text(&padded(n), caps);
            assert_eq!(read.is_ok(), fits, "{n}: {read:?}");
        }
        // One stream named twice by the page is joined into one buffer: past the cap of one.
        let mut twice =
            pdf_with_streams(&[("", text.clone()), ("/Filter /FlateDecode", spaces)], 2);
        let named = b"/Contents [5 0 R 6 0 R]";
        let at = twice.windows(named.len()).position(|w| w == named).unwrap();
        twice.splice(
            at..at + named.len(),
            b"/Contents [6 0 R 6 0 R]".iter().copied(),
        );
        let err = crate::pdf::pdf_text(&twice, caps).unwrap_err();
        assert!(err.contains("decompress to more than 1 MiB each"), "{err}");
    }

    #[test]
    fn files_are_read_by_their_ending() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("notes/.hidden")).unwrap();
        std::fs::write(root.join("notes/a.md"), "# Alpha\nbody").unwrap();
        std::fs::write(root.join("notes/b.txt"), "\nBeta title\nbody").unwrap();
        std::fs::write(root.join("notes/c.bin"), [0u8, 1, 2]).unwrap();
        std::fs::write(root.join("notes/.hidden/d.md"), "# Hidden").unwrap();
        std::fs::write(root.join("notes/e.txt"), [0xffu8, 0xfe]).unwrap();
        let files = document_files(&[root.join("notes")]);
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.md", "b.txt", "e.txt"]);
        let a = read_document(&files[0]).unwrap();
        assert_eq!(a.title, "Alpha");
        assert!(
            a.url.starts_with("file:///") && a.url.ends_with("/notes/a.md"),
            "{}",
            a.url
        );
        assert_eq!(read_document(&files[1]).unwrap().title, "Beta title");
        assert!(read_document(&files[2]).unwrap_err().contains("UTF-8"));
    }
}
