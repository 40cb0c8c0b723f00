//! The shape of a PDF's pages, checked before pdf-extract walks them. pdf-extract follows a
//! page's `/Parent` links to find what it inherits, and runs the content of every XObject a
//! `Do` names, each by calling itself with no bound: a page that is its own parent held a thread
//! forever, a form that draws itself overflowed the stack (which aborts the process, so a
//! `catch_unwind` cannot save the build), and forms that each draw the next one twice, forty
//! deep, would be read a trillion times. So the parent links are cut where they loop, and the
//! drawing is walked here first, the way pdf-extract will walk it, within bounds.

use pdf_extract::content::Content;
use pdf_extract::{Dictionary, Document, Object, ObjectId, Stream};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The most `/Parent` links followed up from a page: page trees are shallow (a balanced tree of
/// a million pages is ten levels deep).
const MAX_TREE_DEPTH: usize = 64;

/// How deep forms may be drawn inside forms (a page's own drawing is level 0).
const MAX_DRAW_DEPTH: usize = 32;

/// The most XObjects drawn for the whole document, counted each time one is drawn (a map that
/// marks 2,000 places with a form, on each of 100 pages, draws 200,000).
const MAX_DRAWS: u64 = 1_000_000;

/// The most XObject content the drawing of the whole document reads, counted each time it is
/// drawn. Images count: pdf-extract decompresses and reads each drawn image as content, every
/// time it is drawn (a 1920 by 1080 background, 6 MB, on each of 300 slides is 1.8 GB).
const MAX_DRAWN_BYTES: u64 = 2 << 30;

/// Cuts each page's chain of `/Parent` links where it loops back or passes [`MAX_TREE_DEPTH`].
/// pdf-extract finds a page's inherited `/Resources` and `/MediaBox` by following the chain
/// until it ends, calling itself at each step. What the cut link would have found it had
/// already passed.
pub(crate) fn cut_parent_loops(document: &mut Document) {
    let mut cuts = Vec::new();
    for page in document.get_pages().into_values() {
        let mut seen = HashSet::from([page]);
        let mut node = page;
        while let Some(parent) = parent_of(document, node) {
            if seen.len() > MAX_TREE_DEPTH || !seen.insert(parent) {
                cuts.push(node);
                break;
            }
            node = parent;
        }
    }
    for node in cuts {
        if let Ok(dict) = document.get_dictionary_mut(node) {
            dict.remove(b"Parent");
        }
    }
}

fn parent_of(document: &Document, node: ObjectId) -> Option<ObjectId> {
    let dict = document.get_dictionary(node).ok()?;
    dict.get(b"Parent").ok()?.as_reference().ok()
}

/// Walks what drawing every page will read, as pdf-extract reads it (each `Do` runs the named
/// XObject's content with the XObject's own `/Resources`, or the caller's), and refuses the
/// document when the forms nest past [`MAX_DRAW_DEPTH`] (a form that draws itself does at
/// once) or the drawing reads more than [`MAX_DRAWS`] XObjects or [`MAX_DRAWN_BYTES`] of their
/// content. Call it after [`cut_parent_loops`].
pub(crate) fn drawing_within_bounds(document: &Document) -> Result<(), String> {
    let mut walk = Walk {
        document,
        contents: HashMap::new(),
        draws: 0,
        bytes: 0,
    };
    for page in document.get_pages().into_values() {
        let Some(resources) = page_resources(document, page) else {
            continue;
        };
        // Only a page that can name an XObject can draw one.
        if dict_entry(document, resources, b"XObject").is_none() {
            continue;
        }
        let content = document.get_page_content(page).unwrap_or_default();
        walk.draw(&drawn_names(&content), resources, 0)?;
    }
    Ok(())
}

/// What drawing one XObject reads: its content's length and the names its `Do`s draw.
struct XObjectContent {
    len: u64,
    draws: Vec<Vec<u8>>,
}

/// The drawing walked so far: each XObject's content (read once), and what has been drawn.
struct Walk<'d> {
    document: &'d Document,
    contents: HashMap<ObjectId, Rc<XObjectContent>>,
    draws: u64,
    bytes: u64,
}

impl<'d> Walk<'d> {
    /// Draws the XObjects `names` name in `resources`, `depth` forms deep.
    fn draw(
        &mut self,
        names: &[Vec<u8>],
        resources: &'d Dictionary,
        depth: usize,
    ) -> Result<(), String> {
        for name in names {
            let Some((id, xobject)) = self.xobject(resources, name) else {
                continue;
            };
            if depth == MAX_DRAW_DEPTH {
                return Err(format!(
                    "the PDF's drawings nest more than {MAX_DRAW_DEPTH} forms deep (a form that \
                     draws itself?); it was not opened"
                ));
            }
            let inner = self.content_of(id, xobject);
            self.draws += 1;
            self.bytes = self.bytes.saturating_add(inner.len);
            if self.draws > MAX_DRAWS || self.bytes > MAX_DRAWN_BYTES {
                return Err(format!(
                    "drawing the PDF's pages reads more than {MAX_DRAWS} forms and images or {} \
                     MiB of their content (forms drawn many times over?); it was not opened",
                    MAX_DRAWN_BYTES >> 20
                ));
            }
            let own = dict_entry(self.document, &xobject.dict, b"Resources");
            self.draw(&inner.draws, own.unwrap_or(resources), depth + 1)?;
        }
        Ok(())
    }

    /// The XObject `name` names in `resources`, as pdf-extract finds it.
    fn xobject(&self, resources: &'d Dictionary, name: &[u8]) -> Option<(ObjectId, &'d Stream)> {
        let xobjects = dict_entry(self.document, resources, b"XObject")?;
        let id = xobjects.get(name).ok()?.as_reference().ok()?;
        let stream = self.document.get_object(id).ok()?.as_stream().ok()?;
        Some((id, stream))
    }

    /// What drawing `xobject` reads, worked out once per XObject.
    fn content_of(&mut self, id: ObjectId, xobject: &Stream) -> Rc<XObjectContent> {
        self.contents
            .entry(id)
            .or_insert_with(|| {
                // As pdf-extract reads it: decompressed where it can be, else as it is.
                let content = xobject
                    .decompressed_content()
                    .unwrap_or_else(|_| xobject.content.clone());
                Rc::new(XObjectContent {
                    len: content.len() as u64,
                    draws: drawn_names(&content),
                })
            })
            .clone()
    }
}

/// The names a content stream's `Do` operators draw, in order (none when it does not decode:
/// pdf-extract then stops at it).
fn drawn_names(content: &[u8]) -> Vec<Vec<u8>> {
    let Ok(content) = Content::decode(content) else {
        return Vec::new();
    };
    content
        .operations
        .into_iter()
        .filter(|op| op.operator == "Do")
        .filter_map(|op| op.operands.first()?.as_name().ok().map(<[u8]>::to_vec))
        .collect()
}

/// A page's `/Resources`, its own or inherited.
fn page_resources(document: &Document, page: ObjectId) -> Option<&Dictionary> {
    let mut node = page;
    for _ in 0..=MAX_TREE_DEPTH {
        let dict = document.get_dictionary(node).ok()?;
        if let Some(resources) = dict_entry(document, dict, b"Resources") {
            return Some(resources);
        }
        node = parent_of(document, node)?;
    }
    None
}

/// The dictionary at `key` of `dict`, written there or referred to.
fn dict_entry<'d>(
    document: &'d Document,
    dict: &'d Dictionary,
    key: &[u8],
) -> Option<&'d Dictionary> {
    match dict.get(key).ok()? {
        Object::Reference(id) => document.get_dictionary(*id).ok(),
        Object::Dictionary(dict) => Some(dict),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdf::{PDF_CAPS, pdf_text};

    /// A one-page PDF: the catalog, `pages` (object 2), `page` (object 3), a font (4), the
    /// page's content (5: `content`) and `more` (6 on).
    fn one_page_pdf(pages: &str, page: &str, content: &str, more: &[String]) -> Vec<u8> {
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            pages.to_string(),
            page.to_string(),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
            stream("", content),
        ];
        objects.extend_from_slice(more);
        crate::test_pdf::pdf_of(&objects)
    }

    fn stream(dict: &str, content: &str) -> String {
        let length = content.len();
        format!("<< {dict} /Length {length} >>\nstream\n{content}\nendstream")
    }

    const PAGES: &str = "<< /Type /Pages /Kids [3 0 R] /Count 1 >>";
    const TEXT: &str = "BT /F1 12 Tf 72 720 Td (Tides follow the moon.) Tj ET";
    const INHERITED: &str = "/MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >>";

    fn loaded(pdf: &[u8]) -> Document {
        Document::load_mem(pdf).unwrap()
    }

    #[test]
    fn pages_inherit_through_their_parents() {
        let pages = format!("<< /Type /Pages /Kids [3 0 R] /Count 1 {INHERITED} >>");
        let page = "<< /Type /Page /Parent 2 0 R /Contents 5 0 R >>";
        let text = pdf_text(&one_page_pdf(&pages, page, TEXT, &[]), PDF_CAPS).unwrap();
        assert!(text.contains("Tides follow the moon."), "{text:?}");
    }

    #[test]
    fn a_page_that_is_its_own_parent_is_read() {
        // No box to find on the page: pdf-extract followed the page to itself forever.
        let page = "<< /Type /Page /Parent 3 0 R /Contents 5 0 R >>";
        let pdf = one_page_pdf(PAGES, page, TEXT, &[]);
        let mut document = loaded(&pdf);
        cut_parent_loops(&mut document);
        let page_dict = document.get_dictionary((3, 0)).unwrap();
        assert!(page_dict.get(b"Parent").is_err(), "{page_dict:?}");
        // Without a page box pdf-extract panics, which the public reader turns into an error.
        let error = crate::pdf_text(&pdf).unwrap_err();
        assert_eq!(error, "the PDF could not be parsed");
        // With one, the page is read.
        let page = format!("<< /Type /Page /Parent 3 0 R /Contents 5 0 R {INHERITED} >>");
        let text = pdf_text(&one_page_pdf(PAGES, &page, TEXT, &[]), PDF_CAPS).unwrap();
        assert!(text.contains("Tides follow the moon."), "{text:?}");
    }

    #[test]
    fn a_chain_of_parents_past_the_depth_is_cut() {
        // The page's parent is object 6, whose parent is 7, and so on: 200 levels, the box at
        // the top.
        let levels = 200;
        let mut more: Vec<String> = (0..levels - 1)
            .map(|i| format!("<< /Type /Pages /Parent {} 0 R >>", i + 7))
            .collect();
        more.push(format!("<< /Type /Pages {INHERITED} >>"));
        let page = "<< /Type /Page /Parent 6 0 R /Contents 5 0 R >>";
        let mut document = loaded(&one_page_pdf(PAGES, page, TEXT, &more));
        cut_parent_loops(&mut document);
        let cut = (6 + MAX_TREE_DEPTH - 1) as u32;
        let below = document.get_dictionary((cut, 0)).unwrap();
        assert!(below.get(b"Parent").is_err(), "{below:?}");
        let above = document.get_dictionary((cut - 1, 0)).unwrap();
        assert!(above.get(b"Parent").is_ok(), "{above:?}");
    }

    /// A page that draws form 6 after its text; form `6 + i` draws the next one `fanout` times,
    /// `levels` forms in all, the last one with a line of its own.
    fn nested_forms(levels: usize, fanout: usize) -> Vec<u8> {
        let forms: Vec<String> = (0..levels)
            .map(|i| {
                let dict = format!(
                    "/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << \
                     /F1 4 0 R >> /XObject << /Next {} 0 R >> >>",
                    i + 7
                );
                let content = if i + 1 == levels {
                    "BT /F1 12 Tf 72 700 Td (Drawn in a form.) Tj ET".to_string()
                } else {
                    vec!["/Next Do"; fanout].join(" ")
                };
                stream(&dict, &content)
            })
            .collect();
        let page = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R \
                    /Resources << /Font << /F1 4 0 R >> /XObject << /First 6 0 R >> >> >>";
        one_page_pdf(PAGES, page, &format!("{TEXT} /First Do"), &forms)
    }

    #[test]
    fn forms_drawn_within_bounds_are_read() {
        // Eight forms deep, each drawing the next once; three wide, 1 + 3 + 9 + ... draws; and
        // one form drawn 2,000 times over (a map's markers).
        for (levels, fanout) in [(8, 1), (6, 3), (2, 2000)] {
            let pdf = nested_forms(levels, fanout);
            assert_eq!(drawing_within_bounds(&loaded(&pdf)), Ok(()));
            let text = pdf_text(&pdf, PDF_CAPS).unwrap();
            assert!(text.contains("Tides follow the moon."), "{text:?}");
            assert!(text.contains("Drawn in a form."), "{text:?}");
        }
    }

    #[test]
    fn a_form_that_draws_itself_is_refused_before_it_is_drawn() {
        // Before, pdf-extract overflowed the stack, which aborts the process.
        let form = stream(
            "/Type /XObject /Subtype /Form /BBox [0 0 10 10] \
             /Resources << /XObject << /Me 6 0 R >> >>",
            "/Me Do",
        );
        let page = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R \
                    /Resources << /Font << /F1 4 0 R >> /XObject << /Me 6 0 R >> >> >>";
        let pdf = one_page_pdf(PAGES, page, &format!("{TEXT} /Me Do"), &[form]);
        let error = pdf_text(&pdf, PDF_CAPS).unwrap_err();
        assert!(error.contains("nest more than 32 forms deep"), "{error}");
        // Past the depth, however it is reached.
        let error = pdf_text(&nested_forms(40, 1), PDF_CAPS).unwrap_err();
        assert!(error.contains("nest more than 32 forms deep"), "{error}");
    }

    #[test]
    fn forms_drawn_a_billion_times_are_refused_before_they_are_drawn() {
        // Thirty forms, each drawing the next twice: 2^30 draws of a few bytes each. Before,
        // pdf-extract would have run for hours.
        let error = pdf_text(&nested_forms(30, 2), PDF_CAPS).unwrap_err();
        assert!(error.contains("more than 1000000 forms"), "{error}");
    }
}
