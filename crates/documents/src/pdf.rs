//! The text layer of a PDF, with what its streams decompress to measured before pdf-extract
//! opens them.
//!
//! pdf-extract (over lopdf) decompresses a stream whole into memory each time it reads one, and
//! a few kilobytes of deflate can stand for gigabytes: a failed allocation aborts the process,
//! which `catch_unwind` cannot catch, so one hostile file would end a whole `index add` or the
//! server. The bound is put in front of the parse rather than around it: parsing in a child
//! process would need an executable to run, and the library is used by the CLI, the server and
//! the desktop app alike. lopdf decodes three filters (Flate, LZW, ASCII85, in chains); each
//! stream is decoded here first through the same chain into a capped buffer, and a document
//! whose streams, or whose page's content streams together, go past the caps is refused. Object
//! streams, which lopdf unpacks while loading, are measured in its load filter, before that.

use pdf_extract::{Document, LoadOptions, Object, ObjectId, Stream};
use std::cell::Cell;
use std::collections::HashMap;
use std::io::Write;

/// What the streams of a PDF may decompress to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PdfCaps {
    /// One stream, and the content streams of one page together (pdf-extract joins them).
    pub stream: u64,
    /// All streams together, each counted once.
    pub total: u64,
}

/// The caps documents are read with: a page's drawing, a font or an image of a long book stays
/// far below (a 9000 by 5000 RGB image is 128 MiB); a document of a hundred such is not text.
pub(crate) const PDF_CAPS: PdfCaps = PdfCaps {
    stream: 128 << 20,
    total: 1 << 30,
};

/// Why the streams of a PDF are not opened.
fn too_large(caps: PdfCaps) -> String {
    format!(
        "the PDF's streams decompress to more than {} MiB each or {} MiB in all (a decompression \
         bomb?); it was not opened",
        caps.stream >> 20,
        caps.total >> 20
    )
}

thread_local! {
    /// The caps and what is left of the total while lopdf loads a document on this thread, and
    /// whether an object stream went past them: lopdf's load filter is a plain `fn`, so this is
    /// where it keeps count.
    static LOADING: Cell<Option<Loading>> = const { Cell::new(None) };
}

#[derive(Debug, Clone, Copy)]
struct Loading {
    caps: PdfCaps,
    left: u64,
    exceeded: bool,
}

/// lopdf's load filter: measures each object stream before lopdf unpacks it, and drops one that
/// goes past the caps (the load then fails on purpose, see [`load`]). Objects are kept by
/// returning them (lopdf keeps the returned copy of the objects inside object streams, and its
/// own of the others).
fn measure_object_stream(id: ObjectId, object: &mut Object) -> Option<(ObjectId, Object)> {
    let (Object::Stream(stream), Some(mut state)) = (&*object, LOADING.get()) else {
        return Some((id, object.clone()));
    };
    if !stream.dict.has_type(b"ObjStm") {
        return Some((id, object.clone()));
    }
    let fits = match decoded_len(stream, state.caps.stream.min(state.left)) {
        Some(len) => {
            state.left -= len;
            true
        }
        None => {
            state.exceeded = true;
            false
        }
    };
    LOADING.set(Some(state));
    fits.then(|| (id, object.clone()))
}

/// The document in `bytes`, its object streams measured as lopdf unpacks them.
fn load(bytes: &[u8], caps: PdfCaps) -> Result<(Document, u64), String> {
    LOADING.set(Some(Loading {
        caps,
        left: caps.total,
        exceeded: false,
    }));
    let loaded =
        Document::load_mem_with_options(bytes, LoadOptions::with_filter(measure_object_stream));
    let state = LOADING.take();
    let document = loaded.map_err(|e| format!("the PDF could not be read: {e}"))?;
    match state {
        Some(state) if !state.exceeded => Ok((document, caps.total - state.left)),
        _ => Err(too_large(caps)),
    }
}

/// The text of a PDF, page after page, its streams within `caps`.
pub(crate) fn pdf_text(bytes: &[u8], caps: PdfCaps) -> Result<String, String> {
    // lopdf's load filter is not applied to encrypted documents, so their object streams would
    // be unpacked unmeasured.
    if contains(bytes, b"/Encrypt") && contains(bytes, b"/ObjStm") {
        return Err(
            "an encrypted PDF with object streams is not read (its streams cannot be measured \
             before they are opened)"
                .into(),
        );
    }
    let (mut document, loading) = load(bytes, caps)?;
    if document.is_encrypted() {
        // What pdf-extract does: the empty password opens documents that only restrict
        // printing or copying.
        document
            .decrypt("")
            .map_err(|e| format!("the PDF is encrypted: {e}"))?;
    }
    within_caps(&document, caps, loading)?;
    crate::pdf_pages::cut_parent_loops(&mut document);
    crate::pdf_pages::drawing_within_bounds(&document)?;
    crate::pdf_fonts::cmaps_within_bounds(&document)?;
    let mut text = String::new();
    pdf_extract::output_doc(&document, &mut pdf_extract::PlainTextOutput::new(&mut text))
        .map_err(|e| format!("the PDF could not be read: {e}"))?;
    Ok(text)
}

/// Whether every stream of `document` (object streams aside: measured while loading, `loading`
/// bytes) decodes within `caps`, as does the content of each page.
fn within_caps(document: &Document, caps: PdfCaps, loading: u64) -> Result<(), String> {
    let mut left = caps.total.saturating_sub(loading);
    let mut sizes: HashMap<ObjectId, u64> = HashMap::new();
    for (&id, object) in &document.objects {
        let Object::Stream(stream) = object else {
            continue;
        };
        if stream.dict.has_type(b"ObjStm") {
            continue;
        }
        let len = decoded_len(stream, caps.stream.min(left)).ok_or_else(|| too_large(caps))?;
        left -= len;
        sizes.insert(id, len);
    }
    for page in document.get_pages().into_values() {
        // A page may name one stream many times; pdf-extract joins them all in one buffer.
        let mut page_len = 0u64;
        for id in document.get_page_contents(page) {
            page_len = page_len.saturating_add(sizes.get(&id).copied().unwrap_or(0));
            if page_len > caps.stream {
                return Err(too_large(caps));
            }
        }
    }
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Bytes `stream` decodes to through lopdf's filters, or `None` when more than `limit`. A
/// filter lopdf does not decode ends the chain (lopdf then hands on the bytes as they are).
fn decoded_len(stream: &Stream, limit: u64) -> Option<u64> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let Ok(filters) = stream.filters() else {
        return (stream.content.len() <= limit).then_some(stream.content.len() as u64);
    };
    let mut data: std::borrow::Cow<'_, [u8]> = std::borrow::Cow::Borrowed(&stream.content);
    for filter in filters {
        let mut out = Capped::new(limit);
        match filter {
            b"FlateDecode" => inflate(&data, &mut out),
            b"LZWDecode" => lzw(&data, early_change(stream), &mut out),
            b"ASCII85Decode" => ascii85(&data, &mut out),
            _ => break,
        }
        if out.exceeded {
            return None;
        }
        data = std::borrow::Cow::Owned(out.bytes);
    }
    (data.len() <= limit).then_some(data.len() as u64)
}

/// A buffer that takes at most `limit` bytes and notes when more were offered.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped {
            bytes: Vec::new(),
            limit,
            exceeded: false,
        }
    }
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.limit - self.bytes.len() {
            self.exceeded = true;
            return Err(std::io::Error::other("over the cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Deflate as lopdf reads it: zlib, and raw deflate after the two header bytes when zlib gives
/// nothing (a broken checksum). Decoding stops at the cap or at the first error.
fn inflate(input: &[u8], out: &mut Capped) {
    let mut zlib = flate2::read::ZlibDecoder::new(input);
    let copied = std::io::copy(&mut zlib, out);
    if copied.is_err() && out.bytes.is_empty() && !out.exceeded && input.len() > 2 {
        let _ = std::io::copy(&mut flate2::read::DeflateDecoder::new(&input[2..]), out);
    }
}

/// `/EarlyChange` of the stream's `/DecodeParms`, 1 unless it says 0 (as lopdf reads it).
fn early_change(stream: &Stream) -> bool {
    stream
        .dict
        .get(b"DecodeParms")
        .and_then(Object::as_dict)
        .and_then(|p| p.get(b"EarlyChange"))
        .and_then(Object::as_i64)
        .map_or(true, |v| v != 0)
}

fn lzw(input: &[u8], early_change: bool, out: &mut Capped) {
    use weezl::{BitOrder, decode::Decoder};
    let mut decoder = if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, 8)
    } else {
        Decoder::new(BitOrder::Msb, 8)
    };
    let _ = decoder.into_stream(out).decode_all(input);
}

/// ASCII85 (`<~`-less, as in PDF streams): groups of five characters `!`..`u` for four bytes,
/// `z` for four zeros, white space skipped, `~` or any other byte the end.
fn ascii85(input: &[u8], out: &mut Capped) {
    let mut group = [0u8; 5];
    let mut filled = 0;
    let push = |out: &mut Capped, group: &[u8; 5], bytes: usize| {
        let value = group
            .iter()
            .fold(0u64, |value, &c| value * 85 + u64::from(c - b'!'));
        let word = u32::try_from(value).unwrap_or(u32::MAX).to_be_bytes();
        out.write_all(&word[..bytes]).is_ok()
    };
    for &c in input {
        let more = match c {
            b'z' if filled == 0 => out.write_all(&[0; 4]).is_ok(),
            b'!'..=b'u' => {
                group[filled] = c;
                filled += 1;
                if filled == 5 {
                    filled = 0;
                    push(out, &group, 4)
                } else {
                    true
                }
            }
            c if c.is_ascii_whitespace() => true,
            _ => false,
        };
        if !more {
            break;
        }
    }
    if filled > 0 && !out.exceeded {
        let bytes = filled - 1;
        group[filled..].fill(b'u');
        push(out, &group, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn stream(filters: &[&str], content: Vec<u8>) -> Stream {
        let mut dict = pdf_extract::Dictionary::new();
        let names: Vec<Object> = filters
            .iter()
            .map(|f| Object::Name(f.as_bytes().to_vec()))
            .collect();
        dict.set("Filter", Object::Array(names));
        Stream::new(dict, content)
    }

    #[test]
    fn filter_chains_are_measured_with_a_cap() {
        let text = b"BT (Tide tables) Tj ET".repeat(100);
        let once = stream(&["FlateDecode"], deflate(&text));
        assert_eq!(decoded_len(&once, 1 << 20), Some(text.len() as u64));
        assert_eq!(decoded_len(&once, 100), None);
        // Deflate twice: a kilobyte or so that stands for 64 MiB.
        let zeros = vec![0u8; 64 << 20];
        let twice = deflate(&deflate(&zeros));
        assert!(twice.len() < 64 << 10, "{}", twice.len());
        let bomb = stream(&["FlateDecode", "FlateDecode"], twice);
        assert_eq!(decoded_len(&bomb, 1 << 20), None);
        assert_eq!(decoded_len(&bomb, 64 << 20), Some(64 << 20));
        // ASCII85 ("z" is four zero bytes), then deflate.
        let mut a85 = b"zzz".to_vec();
        a85.extend_from_slice(b"87cURD]i,\"Ebo7~>");
        let mut out = Capped::new(1 << 10);
        ascii85(&a85, &mut out);
        assert_eq!(out.bytes, b"\0\0\0\0\0\0\0\0\0\0\0\0Hello World");
        let mut out = Capped::new(8);
        ascii85(&a85, &mut out);
        assert!(out.exceeded);
        let unknown = stream(&["DCTDecode"], vec![1, 2, 3]);
        assert_eq!(decoded_len(&unknown, 10), Some(3));
    }
}
