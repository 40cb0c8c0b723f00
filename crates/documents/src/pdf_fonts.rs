//! A PDF's character maps (CMaps: a font's `/ToUnicode`, a composite font's `/Encoding`),
//! checked before pdf-extract reads them with adobe-cmap-parser. That parser calls itself for
//! each nested array, dictionary or parenthesis, so a map nested a hundred thousand deep
//! overflowed the stack (an abort, past any `catch_unwind`); and it fills a table entry by entry
//! for each `bfrange`, so one range of four billion codes asked for gigabytes (the allocation
//! failed: another abort).

use pdf_extract::{Dictionary, Document, Object, ObjectId, Stream};
use std::collections::HashMap;

/// How deep a character map may nest arrays, dictionaries and parentheses: maps hold flat
/// lists of codes.
const MAX_CMAP_NESTING: usize = 32;

/// The most codes one map's `bfrange`s may span together: a font has at most 65,535 glyphs, and
/// a map written as whole planes (`<0000> <FFFF>`) spans 65,536 a plane.
const MAX_CMAP_CODES: u64 = 1 << 18;

/// Checks every character map a font of `document` names, each once; the first that
/// pdf-extract could not read safely is the document's error.
pub(crate) fn cmaps_within_bounds(document: &Document) -> Result<(), String> {
    // The maps, by the object they are, and whether their ranges are read (a `/ToUnicode`).
    let mut maps: HashMap<ObjectId, bool> = HashMap::new();
    // Fonts may sit inside other dictionaries and arrays: walked with a stack of our own, since
    // objects may nest deeper than a thread's stack allows a recursion.
    let mut pending: Vec<&Object> = document.objects.values().collect();
    while let Some(object) = pending.pop() {
        let dict = match object {
            Object::Array(items) => {
                pending.extend(items);
                continue;
            }
            Object::Dictionary(dict) => dict,
            Object::Stream(stream) => &stream.dict,
            _ => continue,
        };
        for (key, ranges) in [(&b"ToUnicode"[..], true), (&b"Encoding"[..], false)] {
            if let Some(id) = referenced_stream(document, dict, key) {
                *maps.entry(id).or_default() |= ranges;
            }
        }
        pending.extend(dict.iter().map(|(_, value)| value));
    }
    for (id, ranges) in maps {
        if let Ok(Object::Stream(stream)) = document.get_object(id) {
            check_map(stream, ranges)?;
        }
    }
    Ok(())
}

/// One map: its nesting, and with `ranges` the codes its `bfrange`s span.
fn check_map(stream: &Stream, ranges: bool) -> Result<(), String> {
    // As pdf-extract reads it: decompressed where it can be, else as it is.
    let content = stream
        .decompressed_content()
        .unwrap_or_else(|_| stream.content.clone());
    if nesting(&content) > MAX_CMAP_NESTING {
        return Err(format!(
            "a character map of the PDF nests more than {MAX_CMAP_NESTING} deep; it was not \
             opened"
        ));
    }
    if ranges && codes_in_ranges(&content) > MAX_CMAP_CODES {
        return Err(format!(
            "a character map of the PDF spans more than {MAX_CMAP_CODES} codes; it was not \
             opened"
        ));
    }
    Ok(())
}

/// The stream `dict`'s `key` refers to, as the object it finally is (references to references
/// followed as lopdf follows them).
fn referenced_stream(document: &Document, dict: &Dictionary, key: &[u8]) -> Option<ObjectId> {
    let reference = dict.get(key).ok()?;
    let (id, object) = document.dereference(reference).ok()?;
    object.as_stream().ok()?;
    id
}

/// The deepest nesting of `[`, `<<` and `(` in `content` (a backslash escapes the next byte;
/// a `<` alone opens a hex string, which does not nest).
fn nesting(content: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut bytes = content.iter().copied().peekable();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\\' => {
                bytes.next();
            }
            b'[' | b'(' => depth += 1,
            b'<' if bytes.next_if_eq(&b'<').is_some() => depth += 1,
            b']' | b')' => depth = depth.saturating_sub(1),
            b'>' if bytes.next_if_eq(&b'>').is_some() => depth = depth.saturating_sub(1),
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// How many codes the map's `bfrange`s span together, read as adobe-cmap-parser reads them
/// (each range: its low and high codes, then where they map to); a map it cannot lex spans
/// none (pdf-extract then fails on it as an error).
fn codes_in_ranges(content: &[u8]) -> u64 {
    use adobe_cmap_parser::Value;
    let Ok(tokens) = adobe_cmap_parser::parse(content) else {
        return 0;
    };
    let code = |value: Option<&Value>| match value {
        Some(Value::LiteralString(bytes)) => Some(
            bytes
                .iter()
                .fold(0u32, |code, &b| (code << 8) | u32::from(b)),
        ),
        _ => None,
    };
    let mut spanned = 0u64;
    let mut at = 0;
    while at < tokens.len() {
        if matches!(&tokens[at], Value::Operator(op) if op == "beginbfrange") {
            at += 1;
            while let (Some(low), Some(high)) = (code(tokens.get(at)), code(tokens.get(at + 1))) {
                let span = u64::from(high).saturating_sub(u64::from(low)) + 1;
                spanned = spanned.saturating_add(span);
                at += 3;
            }
        } else {
            at += 1;
        }
    }
    spanned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdf::{PDF_CAPS, pdf_text};

    /// A one-page PDF in Helvetica whose font maps its codes to Unicode through `cmap`.
    fn pdf_with_cmap(cmap: &str) -> Vec<u8> {
        let content = "BT /F1 12 Tf 72 720 Td (Tides follow the moon.) Tj ET";
        let stream = |text: &str| {
            let length = text.len();
            format!("<< /Length {length} >>\nstream\n{text}\nendstream")
        };
        crate::test_pdf::pdf_of(&[
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 612 792] >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> \
             >> >>"
                .to_string(),
            stream(content),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>".to_string(),
            stream(cmap),
        ])
    }

    fn cmap(ranges: &str) -> String {
        format!(
            "/CIDInit /ProcSet findresource begin 12 dict begin begincmap 1 \
             begincodespacerange <00> <FF> endcodespacerange {ranges} endcmap end end"
        )
    }

    #[test]
    fn a_usual_character_map_is_read() {
        // Every byte to itself, and a whole 16-bit plane written as one range.
        for ranges in [
            "1 beginbfrange <20> <7E> <0020> endbfrange",
            "1 beginbfrange <0000> <FFFF> <0000> endbfrange",
        ] {
            let text = pdf_text(&pdf_with_cmap(&cmap(ranges)), PDF_CAPS).unwrap();
            assert!(
                text.contains("Tides follow the moon."),
                "{ranges}: {text:?}"
            );
        }
    }

    #[test]
    fn a_range_of_four_billion_codes_is_refused_before_it_is_read() {
        // Before, pdf-extract asked for 4.4 GB to hold it, and the failed allocation aborted.
        let ranges = "1 beginbfrange <00000000> <FFFFFFFF> <00000041> endbfrange";
        let error = pdf_text(&pdf_with_cmap(&cmap(ranges)), PDF_CAPS).unwrap_err();
        assert!(error.contains("spans more than 262144 codes"), "{error}");
        // Many ranges add up.
        let many: String = (0..5)
            .map(|i| format!("<{i:02X}0000> <{i:02X}FFFF> <0041> "))
            .collect();
        let ranges = format!("5 beginbfrange {many}endbfrange");
        let error = pdf_text(&pdf_with_cmap(&cmap(&ranges)), PDF_CAPS).unwrap_err();
        assert!(error.contains("spans more than"), "{error}");
    }

    #[test]
    fn a_deeply_nested_character_map_is_refused_before_it_is_parsed() {
        // Before, the parser overflowed the stack, which aborts the process.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let error = pdf_text(&pdf_with_cmap(&cmap(&deep)), PDF_CAPS).unwrap_err();
        assert!(error.contains("nests more than 32 deep"), "{error}");
        assert_eq!(nesting(b"<< /A [ (a\\(b) <00FF> ] >>"), 3);
        assert_eq!(nesting(b"((((x))))"), 4);
    }
}
