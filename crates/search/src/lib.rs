//! Local retrieval for the agent's search tools, offline: BM25 indexes (tantivy) of
//! - a passage file, searched by `<wiki_search>` ([`PassageIndex`]);
//! - the user's documents (Markdown, plain text, HTML, the articles of ZIM archives), searched by `<web_search>` and read again
//!   by `<crawl_page>` ([`DocumentIndex`]).
//!
//! (docs/PROTOCOL.md §3.) Indexes live in one folder each under an indexes folder, with
//! `catena-index.json` describing them. An index is built under a hidden temporary name and
//! renamed into place when complete, so a killed build is never listed or searched.

mod documents;
mod passage_line;
mod passages;

/// The readers of documents, pages and archive articles, a crate of their own so they can be
/// fuzzed without the index engine.
pub use catena_documents as extract;
use catena_protocol::names::is_plain_name;
/// The ZIM reader, a crate of its own so it can be fuzzed without the index engine.
pub use catena_zim as zim;
pub use documents::{DocumentHit, DocumentIndex, StoredDocument, build_documents};
pub use passage_line::{PassageRecord, parse_passage_line};
pub use passages::{Hit, PassageIndex, build_passages};

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, TextFieldIndexing, TextOptions};
use tantivy::{Index, Term};

/// The description file in every index folder.
pub const INFO_FILE: &str = "catena-index.json";
/// The analyser of the indexed text and of queries: words, lower-cased, English stop words
/// removed, Porter-stemmed (what Lucene's English analyser does for BM25 baselines such as
/// Pyserini's). Registered by name on every index this crate creates or opens.
const TOKENIZER: &str = "catena_en";
/// Memory the index writer may use while building.
const WRITER_MEMORY: usize = 256 << 20;

/// What an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Passages of a JSONL file (the wiki-18 layout: `id`, `contents` with the title on its
    /// first line), for `<wiki_search>`.
    Passages,
    /// Documents of files and folders, for `<web_search>` and `<crawl_page>`.
    Documents,
}

impl IndexKind {
    /// What entries are called, plural.
    pub fn entries_noun(self) -> &'static str {
        match self {
            IndexKind::Passages => "passages",
            IndexKind::Documents => "documents",
        }
    }

    /// `n` entries in words: `1 document`, `3 passages`.
    pub fn count(self, n: u64) -> String {
        let noun = self.entries_noun();
        if n == 1 {
            format!("1 {}", noun.trim_end_matches('s'))
        } else {
            format!("{n} {noun}")
        }
    }
}

/// An index as `catena index list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexInfo {
    pub name: String,
    pub kind: IndexKind,
    /// What it was built from: a passage file, or the files and folders of documents.
    #[serde(alias = "source", deserialize_with = "one_or_many")]
    pub sources: Vec<PathBuf>,
    /// Passages or documents indexed.
    #[serde(alias = "passages")]
    pub entries: u64,
    /// Lines that were not passages, or files that could not be read as documents (skipped,
    /// counted here).
    #[serde(alias = "skipped_lines")]
    pub skipped: u64,
    /// Bytes of the sources read.
    #[serde(default)]
    pub source_bytes: u64,
    /// Seconds since the Unix epoch.
    pub built_at: u64,
}

/// Indexes written before an index could have several sources named one.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(path) => vec![path],
        OneOrMany::Many(paths) => paths,
    })
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
    #[error(
        "no documents found in {roots}: Catena indexes Markdown, plain text, HTML and PDF files ({exts}) and ZIM archives (.zim){}",
        first_problem.as_deref().unwrap_or_default(),
        exts = extract::DOCUMENT_EXTENSIONS.join(", ")
    )]
    NoDocuments {
        roots: String,
        first_problem: Option<String>,
    },
    #[error(
        "{path}: line {line} is longer than {} MiB with no end in sight (a passage is a few hundred words: is this a passage file?)",
        limit >> 20
    )]
    LineTooLong {
        path: PathBuf,
        line: u64,
        limit: u64,
    },
    #[error(transparent)]
    Archive(#[from] zim::ZimError),
    #[error("{}: the archive has no HTML article with text", .0.display())]
    EmptyArchive(PathBuf),
    #[error("an index named `{0}` exists already (`catena index rm {0}` removes it)")]
    Exists(String),
    #[error("no index named `{0}` (see `catena index list`)")]
    NotFound(String),
    #[error("the index `{name}` holds {found}, not {wanted}")]
    WrongKind {
        name: String,
        found: &'static str,
        wanted: &'static str,
    },
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

/// Progress of a build: bytes of the sources read so far, of `total_bytes`, and entries indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildProgress {
    pub read_bytes: u64,
    pub total_bytes: u64,
    pub entries: u64,
}

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

/// Options of a field matched against queries: analysed by [`TOKENIZER`] with term frequencies
/// (what BM25 needs).
fn analysed_text() -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    )
}

/// A BM25 query for the words of `query` in any of `fields`. The query is plain words (a model
/// writes it): it is split by the index's own tokenizer, never parsed as query syntax, so
/// quotes, colons or brackets in it cannot fail. `None` when it has no searchable word.
fn words_query(
    index: &Index,
    fields: &[Field],
    query: &str,
) -> Result<Option<BooleanQuery>, SearchError> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    let mut seen: Vec<Term> = Vec::new();
    for &field in fields {
        let mut analyzer = index.tokenizer_for_field(field)?;
        let mut stream = analyzer.token_stream(query);
        while stream.advance() {
            let term = Term::from_field_text(field, &stream.token().text);
            if !seen.contains(&term) {
                seen.push(term.clone());
                clauses.push((
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
                ));
            }
        }
    }
    Ok((!clauses.is_empty()).then(|| BooleanQuery::new(clauses)))
}

/// Builds index `name` in `indexes_dir`: `write` fills a new hidden folder and returns the
/// description, which is saved there before the folder is renamed into place. A failed build
/// leaves nothing.
fn build_in_place(
    indexes_dir: &Path,
    name: &str,
    write: impl FnOnce(&Path) -> Result<IndexInfo, SearchError>,
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
    let written = write(&building).and_then(|info| {
        let info_path = building.join(INFO_FILE);
        let json = serde_json::to_vec_pretty(&info).unwrap_or_default();
        std::fs::write(&info_path, json).map_err(io_at(&info_path))?;
        Ok(info)
    });
    match written {
        Ok(info) => {
            std::fs::rename(&building, &target).map_err(io_at(&target))?;
            Ok(info)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&building);
            Err(e)
        }
    }
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

/// The name of the index of `kind` runs use: `chosen`, else the only index of that kind there
/// is. `None` when none is chosen and there are none or several (the tool then says how to
/// choose).
pub fn choose_name(indexes_dir: &Path, kind: IndexKind, chosen: Option<&str>) -> Option<String> {
    if let Some(name) = chosen {
        return Some(name.to_string());
    }
    let of_kind: Vec<IndexInfo> = list(indexes_dir)
        .into_iter()
        .filter(|i| i.kind == kind)
        .collect();
    match of_kind.as_slice() {
        [only] => Some(only.name.clone()),
        _ => None,
    }
}

/// The fields one kind of index keeps, read back from an opened index's schema.
trait IndexFields: Sized {
    const KIND: IndexKind;
    fn read(schema: &tantivy::schema::Schema, dir: &Path) -> Result<Self, SearchError>;
}

/// What an index of either kind holds once open.
struct Opened<F> {
    index: Index,
    reader: tantivy::IndexReader,
    fields: F,
    info: IndexInfo,
}

/// Opens index `name` of `F`'s kind: its description, its tantivy index with Catena's tokenizer,
/// its fields and a reader that reloads only when asked.
fn open_index<F: IndexFields>(indexes_dir: &Path, name: &str) -> Result<Opened<F>, SearchError> {
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
    if info.kind != F::KIND {
        return Err(SearchError::WrongKind {
            name: name.to_string(),
            found: info.kind.entries_noun(),
            wanted: F::KIND.entries_noun(),
        });
    }
    let index = Index::open_in_dir(&dir)?;
    register_tokenizer(&index);
    let fields = F::read(&index.schema(), &dir)?;
    let reader = index
        .reader_builder()
        .reload_policy(tantivy::ReloadPolicy::Manual)
        .try_into()?;
    Ok(Opened {
        index,
        reader,
        fields,
        info,
    })
}

/// Opens the index of `F`'s kind that runs use ([`choose_name`]) with `open`.
fn choose_index<F: IndexFields, T>(
    indexes_dir: &Path,
    chosen: Option<&str>,
    open: impl FnOnce(&Path, &str) -> Result<T, SearchError>,
) -> Result<Option<T>, SearchError> {
    choose_name(indexes_dir, F::KIND, chosen)
        .map(|name| open(indexes_dir, &name))
        .transpose()
}

/// Field `name` of an opened index's schema.
fn field(schema: &tantivy::schema::Schema, dir: &Path, name: &str) -> Result<Field, SearchError> {
    schema.get_field(name).map_err(|_| SearchError::Broken {
        path: dir.to_path_buf(),
        reason: format!("its schema has no `{name}` field"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_written_before_documents_existed_are_read() {
        let old = r#"{"name": "wiki", "kind": "passages", "source": "/data/wiki.jsonl",
            "passages": 8, "skipped_lines": 1, "built_at": 1}"#;
        let info: IndexInfo = serde_json::from_str(old).unwrap();
        assert_eq!(info.sources, vec![PathBuf::from("/data/wiki.jsonl")]);
        assert_eq!((info.entries, info.skipped, info.source_bytes), (8, 1, 0));
    }
}
