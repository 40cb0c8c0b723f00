//! Passage indexes: one entry per line of a passage file, for `<wiki_search>`.

use crate::extract::{archive_documents, is_archive};
use crate::{
    BuildProgress, IndexFields, IndexInfo, IndexKind, Opened, PassageRecord, SearchError,
    WRITER_MEMORY, analysed_text, build_in_place, choose_index, field, io_at, now_seconds,
    open_index, parse_passage_line, register_tokenizer, words_query,
};
use serde::Serialize;
use std::io::{BufRead, Read};
use std::path::Path;
use tantivy::collector::TopDocs;
use tantivy::schema::{Field, STORED, STRING, Schema, Value};
use tantivy::{Index, IndexReader, TantivyDocument};

/// One passage found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub id: String,
    pub title: String,
    pub text: String,
    /// BM25 score.
    pub score: f32,
}

struct Fields {
    id: Field,
    title: Field,
    text: Field,
    /// Title and text together, indexed, not stored: what a query is matched against.
    contents: Field,
}

impl IndexFields for Fields {
    const KIND: IndexKind = IndexKind::Passages;

    fn read(schema: &tantivy::schema::Schema, dir: &Path) -> Result<Fields, SearchError> {
        Ok(Fields {
            id: field(schema, dir, "id")?,
            title: field(schema, dir, "title")?,
            text: field(schema, dir, "text")?,
            contents: field(schema, dir, "contents")?,
        })
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        title: builder.add_text_field("title", STORED),
        text: builder.add_text_field("text", STORED),
        contents: builder.add_text_field("contents", analysed_text()),
    };
    (builder.build(), fields)
}

/// Builds the passage index `name` in `indexes_dir` from the JSONL file `source`. Lines that are
/// not passages are skipped and counted; a file with none is refused.
pub fn build_passages(
    indexes_dir: &Path,
    name: &str,
    source: &Path,
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<IndexInfo, SearchError> {
    build_in_place(indexes_dir, name, |dir| {
        write_index(dir, name, source, progress)
    })
}

/// Bytes a line of a passage file may hold: a wiki-18 passage takes under 1 KiB, so a longer
/// line is not a passage, and reading it whole would let one line without a newline take all
/// memory.
const MAX_LINE_BYTES: u64 = 1 << 20;

/// Words per passage cut from an archive's articles: the length of the wiki-18 passages the
/// MHQA agent was trained against.
pub const PASSAGE_WORDS: usize = 100;

/// Writes the index of `source` into `dir` (a new folder).
fn write_index(
    dir: &Path,
    name: &str,
    source: &Path,
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<IndexInfo, SearchError> {
    let file = std::fs::File::open(source).map_err(io_at(source))?;
    let total_bytes = file.metadata().map_err(io_at(source))?.len();
    let (schema, fields) = schema();
    let index = Index::create_in_dir(dir, schema)?;
    register_tokenizer(&index);
    let mut writer: tantivy::IndexWriter<TantivyDocument> = index.writer(WRITER_MEMORY)?;
    let add = |p: &PassageRecord| -> Result<(), SearchError> {
        let mut doc = TantivyDocument::default();
        doc.add_text(fields.id, &p.id);
        doc.add_text(fields.title, &p.title);
        doc.add_text(fields.text, &p.text);
        doc.add_text(fields.contents, format!("{}\n{}", p.title, p.text));
        writer.add_document(doc)?;
        Ok(())
    };
    let counts = if is_archive(source) {
        archive_passages(source, total_bytes, &add, progress)?
    } else {
        file_passages(source, file, total_bytes, &add, progress)?
    };
    writer.commit()?;
    writer.wait_merging_threads()?;
    progress(BuildProgress {
        read_bytes: total_bytes,
        total_bytes,
        entries: counts.passages,
    });
    Ok(IndexInfo {
        name: name.to_string(),
        kind: IndexKind::Passages,
        sources: vec![
            source
                .canonicalize()
                .unwrap_or_else(|_| source.to_path_buf()),
        ],
        entries: counts.passages,
        skipped: counts.skipped,
        source_bytes: total_bytes,
        built_at: now_seconds(),
    })
}

struct Counts {
    passages: u64,
    skipped: u64,
}

/// The articles of a ZIM archive cut into passages of [`PASSAGE_WORDS`] words, each with its
/// article's title; articles without text are skipped and counted.
fn archive_passages(
    source: &Path,
    total_bytes: u64,
    add: &dyn Fn(&PassageRecord) -> Result<(), SearchError>,
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<Counts, SearchError> {
    let (mut passages, mut skipped) = (0u64, 0u64);
    let mut added: Result<(), SearchError> = Ok(());
    let read = archive_documents(
        source,
        false,
        &mut |document, at| {
            for (n, text) in split_words(&document.text, PASSAGE_WORDS)
                .into_iter()
                .enumerate()
            {
                if added.is_ok() {
                    added = add(&PassageRecord {
                        id: format!("{}#{}", document.url, n + 1),
                        title: document.title.clone(),
                        text,
                    })
                    .map(|()| passages += 1);
                }
            }
            if at.done % 1_000 == 0 {
                progress(BuildProgress {
                    read_bytes: total_bytes * at.done / at.total.max(1),
                    total_bytes,
                    entries: passages,
                });
            }
        },
        &mut |article, reason| {
            skipped += 1;
            tracing::warn!(%article, %reason, "not indexed");
        },
    );
    added?;
    read?;
    if passages == 0 {
        return Err(SearchError::EmptyArchive(source.to_path_buf()));
    }
    Ok(Counts { passages, skipped })
}

/// `text` in runs of `words` words (the last one shorter), each on one line.
fn split_words(text: &str, words: usize) -> Vec<String> {
    let all: Vec<&str> = text.split_whitespace().collect();
    all.chunks(words.max(1))
        .map(|chunk| chunk.join(" "))
        .collect()
}

/// The passages of a JSONL file; lines that are not passages are skipped and counted, and a
/// file with none is refused with the first problem.
fn file_passages(
    source: &Path,
    file: std::fs::File,
    total_bytes: u64,
    add: &dyn Fn(&PassageRecord) -> Result<(), SearchError>,
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<Counts, SearchError> {
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let (mut passages, mut skipped, mut read_bytes, mut number) = (0u64, 0u64, 0u64, 0u64);
    let mut first_problem: Option<(u64, String)> = None;
    loop {
        line.clear();
        // Bytes, not a String: a line that is not UTF-8 is a bad line, skipped and counted like
        // any other, not the end of the build.
        let n = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(io_at(source))?;
        if n == 0 {
            break;
        }
        number += 1;
        if n as u64 > MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            return Err(SearchError::LineTooLong {
                path: source.to_path_buf(),
                line: number,
                limit: MAX_LINE_BYTES,
            });
        }
        read_bytes += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = std::str::from_utf8(&line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(parse_passage_line);
        match parsed {
            Ok(p) => {
                add(&p)?;
                passages += 1;
            }
            Err(reason) => {
                skipped += 1;
                first_problem.get_or_insert((number, reason));
            }
        }
        if number % 10_000 == 0 {
            progress(BuildProgress {
                read_bytes,
                total_bytes,
                entries: passages,
            });
        }
    }
    if passages == 0 {
        let (line, reason) = first_problem.unwrap_or((0, "the file is empty".into()));
        return Err(SearchError::NoPassages {
            path: source.to_path_buf(),
            line,
            reason,
        });
    }
    Ok(Counts { passages, skipped })
}

/// An open passage index.
pub struct PassageIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    pub info: IndexInfo,
}

impl PassageIndex {
    /// Opens index `name` in `indexes_dir`.
    pub fn open(indexes_dir: &Path, name: &str) -> Result<PassageIndex, SearchError> {
        let Opened {
            index,
            reader,
            fields,
            info,
        } = open_index::<Fields>(indexes_dir, name)?;
        Ok(PassageIndex {
            index,
            reader,
            fields,
            info,
        })
    }

    /// Opens the passage index runs use: `chosen`, else the only one there is (`None` when none
    /// is chosen and there are none or several).
    pub fn choose(
        indexes_dir: &Path,
        chosen: Option<&str>,
    ) -> Result<Option<PassageIndex>, SearchError> {
        choose_index::<Fields, _>(indexes_dir, chosen, PassageIndex::open)
    }

    /// The `k` best passages for `query` (plain words) by BM25 over title and text.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>, SearchError> {
        let Some(query) = words_query(&self.index, &[self.fields.contents], query)? else {
            return Ok(Vec::new());
        };
        if k == 0 {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k))?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let text_of = |field: Field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            hits.push(Hit {
                id: text_of(self.fields.id),
                title: text_of(self.fields.title),
                text: text_of(self.fields.text),
                score,
            });
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{list, remove};
    use std::path::PathBuf;

    fn corpus(dir: &Path) -> PathBuf {
        let path = dir.join("passages.jsonl");
        let lines = [
            r#"{"id": "1", "contents": "\"Ada Lovelace\"\nAda Lovelace wrote the first published algorithm for Charles Babbage's Analytical Engine."}"#,
            r#"{"id": "2", "contents": "\"Analytical Engine\"\nThe Analytical Engine was a proposed mechanical general-purpose computer designed by Charles Babbage."}"#,
            r#"{"id": "3", "contents": "\"Harbour\"\nFishing boats leave the harbour before sunrise."}"#,
            "not json at all",
            r#"{"id": "4", "title": "Lighthouse", "text": "The lighthouse keeper climbs 112 steps every evening."}"#,
        ];
        let mut bytes = lines.join("\n").into_bytes();
        // A line that is not UTF-8 (0xff never is).
        bytes.extend_from_slice(b"\n{\"id\": \"9\", \"contents\": \"\\\"Bad\\\"\\nbyte \xff\"}\n");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn passages_are_found_by_bm25_and_bad_lines_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let indexes = dir.path().join("indexes");
        let source = corpus(dir.path());
        let info = build_passages(&indexes, "wiki", &source, &mut |_| {}).unwrap();
        assert_eq!((info.entries, info.skipped), (4, 2));
        assert_eq!(list(&indexes), vec![info.clone()]);
        let index = PassageIndex::open(&indexes, "wiki").unwrap();
        let hits = index
            .search("Who designed the analytical engines?", 3)
            .unwrap();
        assert_eq!(hits[0].title, "\"Analytical Engine\"");
        assert!(hits.iter().any(|h| h.id == "1"));
        assert!(hits.iter().all(|h| h.id != "3"), "{hits:?}");
        // Query syntax is just text here.
        let odd = index
            .search("lighthouse: \"steps\" (AND) -keeper", 3)
            .unwrap();
        assert_eq!(odd[0].title, "Lighthouse");
        assert!(index.search("   ", 3).unwrap().is_empty());
        assert!(index.search("zebra", 3).unwrap().is_empty());
        assert!(matches!(
            build_passages(&indexes, "wiki", &source, &mut |_| {}),
            Err(SearchError::Exists(_))
        ));
        remove(&indexes, "wiki").unwrap();
        assert!(list(&indexes).is_empty());
        assert!(matches!(
            PassageIndex::open(&indexes, "wiki"),
            Err(SearchError::NotFound(_))
        ));
    }

    #[test]
    fn an_endless_line_is_refused_by_its_number_without_reading_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let indexes = dir.path().join("indexes");
        let source = dir.path().join("endless.jsonl");
        let good = r#"{"id": "1", "title": "Harbour", "text": "Boats leave at dawn."}"#;
        // A line at the limit still reads (its newline included); the third never ends.
        let padded = format!(
            "{{\"id\": \"2\", \"title\": \"Pad\", \"text\": \"x{}\"}}",
            " ".repeat(MAX_LINE_BYTES as usize - 48)
        );
        assert!(padded.len() < MAX_LINE_BYTES as usize);
        let mut bytes = format!("{good}\n{padded}\n").into_bytes();
        bytes.resize(bytes.len() + 3 * MAX_LINE_BYTES as usize, b'a');
        std::fs::write(&source, bytes).unwrap();
        let err = build_passages(&indexes, "endless", &source, &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, SearchError::LineTooLong { line: 3, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("line 3 is longer than 1 MiB"),
            "{err}"
        );
        assert!(list(&indexes).is_empty());
    }

    #[test]
    fn a_file_without_passages_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let indexes = dir.path().join("indexes");
        let source = dir.path().join("bad.jsonl");
        std::fs::write(&source, "{\"id\": 1}\nnope\n").unwrap();
        let err = build_passages(&indexes, "bad", &source, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        assert!(std::fs::read_dir(&indexes).unwrap().next().is_none());
        assert!(matches!(
            build_passages(&indexes, "../x", &source, &mut |_| {}),
            Err(SearchError::BadName(_))
        ));
    }
}
