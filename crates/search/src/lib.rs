//! Local retrieval for the agent's search tools, offline: a BM25 index (tantivy) of a passage
//! file, searched by `<wiki_search>` (docs/PROTOCOL.md §3).
//!
//! Indexes live in one folder each under an indexes folder, with `catena-index.json` describing
//! them. An index is built under a hidden temporary name and renamed into place when complete,
//! so a killed build is never listed or searched.

mod passages;

pub use catena_protocol::units::is_plain_name;
pub use passages::{PassageRecord, parse_passage_line};

use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term};

/// The description file in every index folder.
pub const INFO_FILE: &str = "catena-index.json";
/// The analyser of the indexed text and of queries: words, lower-cased, English stop words
/// removed, Porter-stemmed (what Lucene's English analyser does for BM25 baselines such as
/// Pyserini's). Registered by name on every index this crate creates or opens.
const TOKENIZER: &str = "catena_en";

fn register_tokenizer(index: &Index) {
    use tantivy::tokenizer::{
        Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
        TextAnalyzer,
    };
    let mut builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .dynamic();
    if let Some(stop_words) = StopWordFilter::new(Language::English) {
        builder = builder.filter_dynamic(stop_words);
    }
    let analyzer = builder
        .filter_dynamic(Stemmer::new(Language::English))
        .build();
    index.tokenizers().register(TOKENIZER, analyzer);
}
/// Memory the index writer may use while building.
const WRITER_MEMORY: usize = 256 << 20;

/// What an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Passages of a JSONL file (the wiki-18 layout: `id`, `contents` with the title on its
    /// first line), for `<wiki_search>`.
    Passages,
}

/// An index as `catena index list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexInfo {
    pub name: String,
    pub kind: IndexKind,
    /// The file it was built from.
    pub source: PathBuf,
    pub passages: u64,
    /// Lines of the source that were not passages (skipped, counted here).
    pub skipped_lines: u64,
    /// Seconds since the Unix epoch.
    pub built_at: u64,
}

/// One passage found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub id: String,
    pub title: String,
    pub text: String,
    /// BM25 score.
    pub score: f32,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: no line is a passage (expected JSON lines with `id` and `contents`, or `title` and `text`); the first problem, line {line}: {reason}"
    )]
    NoPassages {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("an index named `{0}` exists already (`catena index rm {0}` removes it)")]
    Exists(String),
    #[error("no index named `{0}` (see `catena index list`)")]
    NotFound(String),
    #[error("the index name `{0}` must be letters, digits, `-`, `_` and `.`")]
    BadName(String),
    #[error("the index at {path} cannot be read: {reason}")]
    Broken { path: PathBuf, reason: String },
    #[error("the search index failed: {0}")]
    Engine(#[from] tantivy::TantivyError),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> SearchError + '_ {
    move |source| SearchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

struct Fields {
    id: Field,
    title: Field,
    text: Field,
    /// Title and text together, indexed, not stored: what a query is matched against.
    contents: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexed = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        title: builder.add_text_field("title", STORED),
        text: builder.add_text_field("text", STORED),
        contents: builder.add_text_field("contents", indexed),
    };
    (builder.build(), fields)
}

fn fields_of(schema: &Schema, path: &Path) -> Result<Fields, SearchError> {
    let get = |name: &str| {
        schema.get_field(name).map_err(|_| SearchError::Broken {
            path: path.to_path_buf(),
            reason: format!("its schema has no `{name}` field"),
        })
    };
    Ok(Fields {
        id: get("id")?,
        title: get("title")?,
        text: get("text")?,
        contents: get("contents")?,
    })
}

/// Progress of [`build_passages`]: bytes of the source read so far, of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildProgress {
    pub read_bytes: u64,
    pub total_bytes: u64,
    pub passages: u64,
}

/// Builds the passage index `name` in `indexes_dir` from the JSONL file `source`. Lines that are
/// not passages are skipped and counted; a file with none is refused.
pub fn build_passages(
    indexes_dir: &Path,
    name: &str,
    source: &Path,
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<IndexInfo, SearchError> {
    if !is_plain_name(name) {
        return Err(SearchError::BadName(name.to_string()));
    }
    let target = indexes_dir.join(name);
    if target.exists() {
        return Err(SearchError::Exists(name.to_string()));
    }
    let building = indexes_dir.join(format!(".building-{name}"));
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(io_at(&building))?;
    }
    std::fs::create_dir_all(&building).map_err(io_at(&building))?;
    let result = write_index(&building, name, source, progress);
    let info = match result {
        Ok(info) => info,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&building);
            return Err(e);
        }
    };
    std::fs::rename(&building, &target).map_err(io_at(&target))?;
    Ok(info)
}

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
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let (mut passages, mut skipped, mut read_bytes, mut number) = (0u64, 0u64, 0u64, 0u64);
    let mut first_problem: Option<(u64, String)> = None;
    loop {
        line.clear();
        // Bytes, not a String: a line that is not UTF-8 is a bad line, skipped and counted like
        // any other, not the end of the build.
        let n = reader.read_until(b'\n', &mut line).map_err(io_at(source))?;
        if n == 0 {
            break;
        }
        number += 1;
        read_bytes += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = std::str::from_utf8(&line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(parse_passage_line);
        match parsed {
            Ok(p) => {
                let mut doc = TantivyDocument::default();
                doc.add_text(fields.id, &p.id);
                doc.add_text(fields.title, &p.title);
                doc.add_text(fields.text, &p.text);
                doc.add_text(fields.contents, format!("{}\n{}", p.title, p.text));
                writer.add_document(doc)?;
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
                passages,
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
    writer.commit()?;
    writer.wait_merging_threads()?;
    progress(BuildProgress {
        read_bytes,
        total_bytes,
        passages,
    });
    let info = IndexInfo {
        name: name.to_string(),
        kind: IndexKind::Passages,
        source: source
            .canonicalize()
            .unwrap_or_else(|_| source.to_path_buf()),
        passages,
        skipped_lines: skipped,
        built_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let info_path = dir.join(INFO_FILE);
    let json = serde_json::to_vec_pretty(&info).unwrap_or_default();
    std::fs::write(&info_path, json).map_err(io_at(&info_path))?;
    Ok(info)
}

/// The indexes in `indexes_dir`, by name (folders without a readable description are left out).
pub fn list(indexes_dir: &Path) -> Vec<IndexInfo> {
    let Ok(entries) = std::fs::read_dir(indexes_dir) else {
        return Vec::new();
    };
    let mut found: Vec<IndexInfo> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| std::fs::read(e.path().join(INFO_FILE)).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Removes index `name`.
pub fn remove(indexes_dir: &Path, name: &str) -> Result<(), SearchError> {
    if !is_plain_name(name) {
        return Err(SearchError::BadName(name.to_string()));
    }
    let dir = indexes_dir.join(name);
    if !dir.join(INFO_FILE).is_file() {
        return Err(SearchError::NotFound(name.to_string()));
    }
    std::fs::remove_dir_all(&dir).map_err(io_at(&dir))
}

/// The passage index runs use: `chosen` by name, else the only passage index there is. `None`
/// when none is chosen and there are none or several (the tool then says how to choose).
pub fn choose(
    indexes_dir: &Path,
    chosen: Option<&str>,
) -> Result<Option<PassageIndex>, SearchError> {
    let name = match chosen {
        Some(name) => name.to_string(),
        None => {
            let passages: Vec<IndexInfo> = list(indexes_dir)
                .into_iter()
                .filter(|i| i.kind == IndexKind::Passages)
                .collect();
            match passages.as_slice() {
                [only] => only.name.clone(),
                _ => return Ok(None),
            }
        }
    };
    PassageIndex::open(indexes_dir, &name).map(Some)
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
        if !is_plain_name(name) {
            return Err(SearchError::BadName(name.to_string()));
        }
        let dir = indexes_dir.join(name);
        let info_path = dir.join(INFO_FILE);
        let info: IndexInfo = match std::fs::read(&info_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| SearchError::Broken {
                path: dir.clone(),
                reason: format!("{INFO_FILE}: {e}"),
            })?,
            Err(_) => return Err(SearchError::NotFound(name.to_string())),
        };
        let index = Index::open_in_dir(&dir)?;
        register_tokenizer(&index);
        let fields = fields_of(&index.schema(), &dir)?;
        let reader = index.reader()?;
        Ok(PassageIndex {
            index,
            reader,
            fields,
            info,
        })
    }

    /// The `k` best passages for `query` by BM25 over title and text. The query is plain words
    /// (a model writes it): it is split by the index's own tokenizer, never parsed as query
    /// syntax, so quotes, colons or brackets in it cannot fail.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>, SearchError> {
        let mut analyzer = self.index.tokenizer_for_field(self.fields.contents)?;
        let mut stream = analyzer.token_stream(query);
        let mut terms: Vec<Term> = Vec::new();
        while stream.advance() {
            let term = Term::from_field_text(self.fields.contents, &stream.token().text);
            if !terms.contains(&term) {
                terms.push(term);
            }
        }
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .into_iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs));
                (Occur::Should, q)
            })
            .collect();
        let query = BooleanQuery::new(clauses);
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
        assert_eq!((info.passages, info.skipped_lines), (4, 2));
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
