//! Hostile files given to `catena index add`, against the real binary: a page of 200,000 nested
//! `<div>`s (it took minutes and gigabytes to convert), a PDF whose page stream inflates to
//! 512 MiB from a few kilobytes (gigabytes aborted the whole build: an allocation failure is no
//! panic), a PDF whose page is its own parent (the build never ended), one whose form draws
//! itself (a stack overflow ended the build), one whose font maps four billion codes (so did a
//! failed allocation), and a passage file whose line never ends. Each build finishes, indexes
//! what is readable and says what it left out.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Longest a build of a few small files may take before it counts as held: it takes seconds,
/// and the nested page alone used to take minutes.
const PATIENCE: Duration = Duration::from_secs(120);

/// `catena index add` with `args`, data in `data`, killed if it outlasts [`PATIENCE`] (then the
/// test fails, saying so).
fn index_add(data: &Path, args: &[&str]) -> Output {
    let mut add = Command::new(common::catena_bin());
    add.env("CATENA_DATA_DIR", data)
        .env("CATENA_CACHE_DIR", data.join("cache"))
        .env("CATENA_STORE_DIR", data.join("sessions"))
        .env_remove("RUST_LOG")
        .args(["index", "add"])
        .args(args);
    common::output_within(&mut add, data, PATIENCE, "`catena index add`")
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// The page of [`pdf`]'s documents: its box and fonts, its parent the page tree.
const PAGE: &[u8] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
    /Resources << /Font << /F1 5 0 R >> >> >>";

/// A one-page PDF whose page (object 3) is `page`, its stream `stream` filtered by `filters`,
/// and `more` objects (6 on).
fn pdf(page: &[u8], filters: &str, stream: &[u8], more: &[&[u8]]) -> Vec<u8> {
    let mut content = format!("<< /Length {} {filters} >>\nstream\n", stream.len()).into_bytes();
    content.extend_from_slice(stream);
    content.extend_from_slice(b"\nendstream");
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        page.to_vec(),
        content,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    objects.extend(more.iter().map(|object| object.to_vec()));
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    let size = objects.len() + 1;
    out.extend_from_slice(format!("xref\n0 {size}\n0000000000 65535 f \n").as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n").as_bytes(),
    );
    out
}

#[test]
fn index_add_survives_a_nested_page_and_hostile_pdfs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let docs = data.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("tides.md"),
        "# Tide tables\n\nHigh water at the north pier is at 06:52 on Tuesday.\n",
    )
    .unwrap();
    let nested = format!(
        "<title>Nested</title>{}<p>The lighthouse keeper climbs 112 steps.</p>{}",
        "<div>".repeat(200_000),
        "</div>".repeat(200_000)
    );
    std::fs::write(docs.join("nested.html"), nested).unwrap();
    // 512 MiB of zeros, deflated twice: a few kilobytes on disk.
    let inner = {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let block = vec![0u8; 1 << 20];
        for _ in 0..512 {
            encoder.write_all(&block).unwrap();
        }
        encoder.finish().unwrap()
    };
    let bomb = pdf(
        PAGE,
        "/Filter [/FlateDecode /FlateDecode]",
        &deflate(&inner),
        &[],
    );
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    std::fs::write(docs.join("bomb.pdf"), bomb).unwrap();
    // Its own parent, and no resources there: pdf-extract looked for them up the tree forever.
    let looping = b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>";
    let text = b"BT /F1 12 Tf 72 720 Td (The ferry leaves at 07:15.) Tj ET";
    std::fs::write(docs.join("looping.pdf"), pdf(looping, "", text, &[])).unwrap();
    // A form that draws itself: pdf-extract overflowed the stack, which ended the whole build.
    let drawing = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
        /Resources << /Font << /F1 5 0 R >> /XObject << /Me 6 0 R >> >> >>";
    let form: &[u8] = b"<< /Type /XObject /Subtype /Form /BBox [0 0 9 9] /Resources << \
        /XObject << /Me 6 0 R >> >> /Length 6 >>\nstream\n/Me Do\nendstream";
    let text = b"BT /F1 12 Tf 72 720 Td (The ferry leaves at 07:15.) Tj ET /Me Do";
    std::fs::write(docs.join("drawing.pdf"), pdf(drawing, "", text, &[form])).unwrap();
    // A font whose character map spans four billion codes: the failed allocation ended the build.
    let mapped = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
        /Resources << /Font << /F1 6 0 R >> >> >>";
    let font: &[u8] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 7 0 R >>";
    let cmap: &[u8] = b"<< /Length 76 >>\nstream\nbegincmap 1 beginbfrange <00000000> \
        <FFFFFFFF> <00000041> endbfrange endcmap\nendstream";
    let text = b"BT /F1 12 Tf 72 720 Td (The ferry leaves at 07:15.) Tj ET";
    std::fs::write(
        docs.join("mapped.pdf"),
        pdf(mapped, "", text, &[font, cmap]),
    )
    .unwrap();

    let add = index_add(data, &[docs.to_str().unwrap(), "--name", "docs"]);
    let said = String::from_utf8_lossy(&add.stderr);
    assert!(add.status.success(), "{said}");
    assert!(
        said.contains("Indexed 2 documents") && said.contains("4 files that could not be read"),
        "{said}"
    );
    assert!(said.contains("bomb.pdf"), "{said}");
    assert!(said.contains("decompress to more than"), "{said}");
    assert!(said.contains("looping.pdf"), "{said}");
    assert!(said.contains("drawing.pdf"), "{said}");
    assert!(said.contains("nest more than 32 forms deep"), "{said}");
    assert!(said.contains("mapped.pdf"), "{said}");
    assert!(said.contains("spans more than 262144 codes"), "{said}");

    let search = |query: &str| {
        let out = Command::new(common::catena_bin())
            .env("CATENA_DATA_DIR", data)
            .env("CATENA_CACHE_DIR", data.join("cache"))
            .args(["index", "search", "docs", query])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(search("north pier high water").contains("1. [Tide tables]"));
    assert!(search("lighthouse keeper steps").contains("1. [Nested]"));
}

#[test]
fn a_passage_line_that_never_ends_is_refused_by_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let file = data.join("passages.jsonl");
    let mut bytes = br#"{"id": "1", "title": "Harbour", "text": "Boats leave at dawn."}"#.to_vec();
    bytes.push(b'\n');
    // 64 MiB without a newline: the reader used to hold the whole line (a 4 GB one aborted).
    bytes.resize(bytes.len() + (64 << 20), b'x');
    std::fs::write(&file, bytes).unwrap();
    let add = index_add(data, &[file.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&add.stderr);
    assert!(!add.status.success(), "{said}");
    assert!(said.contains("line 2 is longer than 1 MiB"), "{said}");
}
