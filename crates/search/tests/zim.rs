//! ZIM archives made by Debian's `zim-tools` (the writer Kiwix's own archives come from), indexed
//! as documents and as passages.
// The helper's panics are the tests' failure reports, as in the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use catena_search::zim::ZimArchive;
use catena_search::{DocumentIndex, IndexKind, PassageIndex, build_documents, build_passages};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small site packed by `zimwriterfs` into `dir/harbour.zim`: two articles that link to each
/// other, one in a folder, and an image.
fn harbour_archive(dir: &Path) -> PathBuf {
    let site = dir.join("site");
    std::fs::create_dir_all(site.join("wiki")).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<html><head><title>Harbour wiki</title></head><body><h1>Welcome</h1>\
         <p>The harbour guide. See <a href=\"wiki/Tides.html\">the tide tables</a>.</p></body></html>",
    )
    .unwrap();
    let long_text = "Fishing boats leave before sunrise. ".repeat(60);
    std::fs::write(
        site.join("wiki/Tides.html"),
        format!(
            "<html><head><title>Tides</title></head><body><p>High water at the north pier \
             comes forty minutes after the south pier.</p><p>{long_text}</p>\
             <p>Back to <a href=\"../index.html\">the guide</a>.</p></body></html>"
        ),
    )
    .unwrap();
    // zimwriterfs stores the illustration as it is; it does not decode it.
    std::fs::write(site.join("icon.png"), b"\x89PNG\r\n\x1a\n").unwrap();
    let archive = dir.join("harbour.zim");
    let out = Command::new("zimwriterfs")
        .args([
            "--welcome=index.html",
            "--illustration=icon.png",
            "--language=eng",
            "--title=Harbour",
            "--description=Harbour notes",
            "--creator=Catena tests",
            "--publisher=Catena tests",
        ])
        .arg(&site)
        .arg(&archive)
        .output()
        .expect("zimwriterfs (Debian's zim-tools: scripts/setup/packages.sh) must be on PATH");
    assert!(
        out.status.success(),
        "zimwriterfs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    archive
}

#[test]
fn archive_articles_are_documents_with_zim_urls_and_working_links() {
    let dir = tempfile::tempdir().unwrap();
    let archive = harbour_archive(dir.path());
    let mut zim = ZimArchive::open(&archive).unwrap();
    let html = zim.entries(|mime| mime.starts_with("text/html")).unwrap();
    let mut paths: Vec<&str> = html.iter().map(|e| e.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["index.html", "wiki/Tides.html"]);

    let indexes = dir.path().join("indexes");
    let info = build_documents(&indexes, "harbour", &[archive], &mut |_| {}).unwrap();
    assert_eq!((info.kind, info.entries), (IndexKind::Documents, 2));
    let index = DocumentIndex::open(&indexes, "harbour").unwrap();
    let hits = index.search("high water north pier", 10).unwrap();
    assert_eq!(hits[0].title, "Tides");
    assert_eq!(hits[0].url, "zim://harbour/wiki/Tides.html");
    assert!(hits[0].snippet.contains("north pier"), "{:?}", hits[0]);
    let page = index.document(&hits[0].url).unwrap().unwrap();
    // The link back to the guide is absolute and names a document of the same index.
    assert!(
        page.text.contains("zim://harbour/index.html"),
        "{}",
        page.text
    );
    assert!(
        index
            .document("zim://harbour/index.html")
            .unwrap()
            .is_some()
    );
}

#[test]
fn archive_articles_are_cut_into_passages() {
    let dir = tempfile::tempdir().unwrap();
    let archive = harbour_archive(dir.path());
    let indexes = dir.path().join("indexes");
    let info = build_passages(&indexes, "harbour", &archive, &mut |_| {}).unwrap();
    // The tide article has 20 + 360 + 4 words: four passages; the guide one.
    assert_eq!((info.kind, info.entries), (IndexKind::Passages, 5));
    let index = PassageIndex::open(&indexes, "harbour").unwrap();
    let hits = index.search("north pier high water", 3).unwrap();
    assert_eq!(hits[0].title, "Tides");
    assert!(hits[0].text.starts_with("High water at the north pier"));
    assert_eq!(hits[0].text.split_whitespace().count(), 100);
    assert!(
        !hits[0].text.contains('['),
        "no link markers: {}",
        hits[0].text
    );
}

#[test]
fn a_broken_archive_is_reported_not_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let archive = harbour_archive(dir.path());
    let mut bytes = std::fs::read(&archive).unwrap();
    bytes.truncate(bytes.len() / 2);
    let cut = dir.path().join("cut.zim");
    std::fs::write(&cut, &bytes).unwrap();
    let indexes = dir.path().join("indexes");
    let err =
        build_documents(&indexes, "cut", std::slice::from_ref(&cut), &mut |_| {}).unwrap_err();
    let said = err.to_string();
    assert!(said.contains("cut.zim: not a ZIM archive"), "{said}");
    let err = build_passages(&indexes, "cut", &cut, &mut |_| {}).unwrap_err();
    let said = err.to_string();
    assert!(said.contains("cut.zim: not a ZIM archive"), "{said}");
    assert!(!said.contains("line"), "{said}");
    assert!(catena_search::list(&indexes).is_empty());
}
