//! Document indexes: the user's Markdown, text, HTML and PDF files and ZIM archives, searched like
//! the web by `<web_search>` (title, URL, a snippet around the matched words, a date where the file
//! has one) and read again by `<crawl_page>` from the stored text, never from the disk at the URL a
//! model wrote: only what the user indexed can be read this way.

use crate::extract::{Document, archive_documents, document_files, is_archive, read_document};
use crate::{
    BuildProgress, IndexFields, IndexInfo, IndexKind, Opened, SearchError, WRITER_MEMORY,
    analysed_text, build_in_place, choose_index, field, now_seconds, open_index,
    register_tokenizer, words_query,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use tantivy::collector::TopDocs;
use tantivy::query::TermQuery;
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, Value};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, TantivyDocument, Term};

/// Characters of a hit's snippet.
const SNIPPET_CHARS: usize = 240;

/// One document found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DocumentHit {
    pub title: String,
    pub url: String,
    /// The passage around the matched words, on one line.
    pub snippet: String,
    pub date: Option<String>,
    /// BM25 score.
    pub score: f32,
}

/// A document as indexed, for reading it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDocument {
    pub title: String,
    pub url: String,
    pub text: String,
    pub date: Option<String>,
}

struct Fields {
    url: Field,
    title: Field,
    body: Field,
    date: Field,
}

impl IndexFields for Fields {
    const KIND: IndexKind = IndexKind::Documents;

    fn read(schema: &tantivy::schema::Schema, dir: &Path) -> Result<Fields, SearchError> {
        Ok(Fields {
            url: field(schema, dir, "url")?,
            title: field(schema, dir, "title")?,
            body: field(schema, dir, "body")?,
            date: field(schema, dir, "date")?,
        })
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        url: builder.add_text_field("url", STRING | STORED),
        title: builder.add_text_field("title", analysed_text().set_stored()),
        body: builder.add_text_field("body", analysed_text().set_stored()),
        date: builder.add_text_field("date", STORED),
    };
    (builder.build(), fields)
}

/// Builds the document index `name` in `indexes_dir` from the documents under `roots` (files or
/// folders). Files that cannot be read as documents are skipped and counted; no documents at
/// all is an error.
pub fn build_documents(
    indexes_dir: &Path,
    name: &str,
    roots: &[PathBuf],
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<IndexInfo, SearchError> {
    let mut absolute = Vec::with_capacity(roots.len());
    for root in roots {
        absolute.push(root.canonicalize().map_err(crate::io_at(root))?);
    }
    build_in_place(indexes_dir, name, |dir| {
        write_index(dir, name, &absolute, progress)
    })
}

fn write_index(
    dir: &Path,
    name: &str,
    roots: &[PathBuf],
    progress: &mut dyn FnMut(BuildProgress),
) -> Result<IndexInfo, SearchError> {
    let files = document_files(roots);
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .collect();
    let total_bytes = sizes.iter().sum();
    let (schema, fields) = schema();
    let index = Index::create_in_dir(dir, schema)?;
    register_tokenizer(&index);
    let mut writer: tantivy::IndexWriter<TantivyDocument> = index.writer(WRITER_MEMORY)?;
    let (mut documents, mut skipped, mut read_bytes) = (0u64, 0u64, 0u64);
    let mut first_problem: Option<String> = None;
    let add = |document: Document| -> Result<(), SearchError> {
        let mut doc = TantivyDocument::default();
        doc.add_text(fields.url, &document.url);
        doc.add_text(fields.title, &document.title);
        doc.add_text(fields.body, &document.text);
        if let Some(date) = &document.date {
            doc.add_text(fields.date, date);
        }
        writer.add_document(doc)?;
        Ok(())
    };
    for (file, &size) in files.iter().zip(&sizes) {
        let mut not_indexed = |what: String, reason: String| {
            skipped += 1;
            tracing::warn!(%what, %reason, "not indexed");
            first_problem.get_or_insert_with(|| format!("{what}: {reason}"));
        };
        if is_archive(file) {
            // Articles are added as they are read; the first error stops the archive, and
            // the index is then not committed (the build fails as a whole).
            let mut added: Result<(), SearchError> = Ok(());
            let read = archive_documents(
                file,
                true,
                &mut |document, at| {
                    if added.is_ok() {
                        added = add(document).map(|()| documents += 1);
                    }
                    if at.done % 1_000 == 0 || at.done == at.total {
                        progress(BuildProgress {
                            read_bytes: read_bytes + size * at.done / at.total.max(1),
                            total_bytes,
                            entries: documents,
                        });
                    }
                },
                &mut |article, reason| {
                    not_indexed(format!("{} ({article})", file.display()), reason)
                },
            );
            added?;
            if let Err(e) = read {
                not_indexed(file.display().to_string(), e.to_string());
            }
        } else {
            match read_document(file) {
                Ok(document) => {
                    add(document)?;
                    documents += 1;
                }
                Err(reason) => not_indexed(file.display().to_string(), reason),
            }
        }
        read_bytes += size;
        progress(BuildProgress {
            read_bytes,
            total_bytes,
            entries: documents,
        });
    }
    if documents == 0 {
        let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(SearchError::NoDocuments {
            roots: names.join(", "),
            first_problem: first_problem.map(|p| format!("; the first problem, {p}")),
        });
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    Ok(IndexInfo {
        name: name.to_string(),
        kind: IndexKind::Documents,
        sources: roots.to_vec(),
        entries: documents,
        skipped,
        source_bytes: read_bytes,
        built_at: now_seconds(),
    })
}

/// An open document index.
pub struct DocumentIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    pub info: IndexInfo,
}

impl DocumentIndex {
    /// Opens index `name` in `indexes_dir`.
    pub fn open(indexes_dir: &Path, name: &str) -> Result<DocumentIndex, SearchError> {
        let Opened {
            index,
            reader,
            fields,
            info,
        } = open_index::<Fields>(indexes_dir, name)?;
        Ok(DocumentIndex {
            index,
            reader,
            fields,
            info,
        })
    }

    /// Opens the document index runs use: `chosen`, else the only one there is (`None` when none
    /// is chosen and there are none or several).
    pub fn choose(
        indexes_dir: &Path,
        chosen: Option<&str>,
    ) -> Result<Option<DocumentIndex>, SearchError> {
        choose_index::<Fields, _>(indexes_dir, chosen, DocumentIndex::open)
    }

    /// The `k` best documents for `query` (plain words) by BM25 over title and text, each with
    /// a snippet around the matched words.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<DocumentHit>, SearchError> {
        let fields = [self.fields.title, self.fields.body];
        let Some(query) = words_query(&self.index, &fields, query)? else {
            return Ok(Vec::new());
        };
        if k == 0 {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k))?;
        let mut snippets = SnippetGenerator::create(&searcher, &query, self.fields.body)?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let stored = self.stored(&doc);
            let fragment = snippets.snippet_from_doc(&doc);
            let snippet = if fragment.fragment().trim().is_empty() {
                // The words matched the title only: the text's beginning stands in.
                stored.text.chars().take(SNIPPET_CHARS).collect()
            } else {
                fragment.fragment().to_string()
            };
            hits.push(DocumentHit {
                title: stored.title,
                url: stored.url,
                snippet: snippet.split_whitespace().collect::<Vec<_>>().join(" "),
                date: stored.date,
                score,
            });
        }
        Ok(hits)
    }

    /// The indexed document at `url`, exactly as a hit named it.
    pub fn document(&self, url: &str) -> Result<Option<StoredDocument>, SearchError> {
        let query = TermQuery::new(
            Term::from_field_text(self.fields.url, url),
            IndexRecordOption::Basic,
        );
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(1))?;
        match top.first() {
            Some((_, address)) => {
                let doc: TantivyDocument = searcher.doc(*address)?;
                Ok(Some(self.stored(&doc)))
            }
            None => Ok(None),
        }
    }

    fn stored(&self, doc: &TantivyDocument) -> StoredDocument {
        let text_of = |field: Field| {
            doc.get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        StoredDocument {
            title: text_of(self.fields.title).unwrap_or_default(),
            url: text_of(self.fields.url).unwrap_or_default(),
            text: text_of(self.fields.body).unwrap_or_default(),
            date: text_of(self.fields.date),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_found_with_snippets_and_read_again_by_url() {
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(
            docs.join("tides.md"),
            "---\ntitle: Tide tables\ndate: 2024-03-09\n---\nThe harbour master publishes \
             tide tables every Monday. High water at the north pier comes forty minutes \
             after the south pier.",
        )
        .unwrap();
        std::fs::write(
            docs.join("boats.html"),
            "<title>Fishing boats</title><p>Boats leave the harbour before sunrise.</p>",
        )
        .unwrap();
        std::fs::write(docs.join("image.png"), [137u8, 80, 78, 71]).unwrap();
        std::fs::write(docs.join("broken.txt"), [0xffu8, 0xff]).unwrap();
        let indexes = dir.path().join("indexes");
        let info =
            build_documents(&indexes, "notes", std::slice::from_ref(&docs), &mut |_| {}).unwrap();
        assert_eq!(
            (info.kind, info.entries, info.skipped),
            (IndexKind::Documents, 2, 1)
        );
        let index = DocumentIndex::open(&indexes, "notes").unwrap();
        let hits = index
            .search("when is high water at the north pier?", 10)
            .unwrap();
        assert_eq!(hits[0].title, "Tide tables");
        assert_eq!(hits[0].date.as_deref(), Some("2024-03-09"));
        assert!(hits[0].snippet.contains("north pier"), "{:?}", hits[0]);
        assert!(hits[0].url.starts_with("file:///"), "{}", hits[0].url);
        let read = index.document(&hits[0].url).unwrap().unwrap();
        assert!(read.text.contains("forty minutes"));
        assert_eq!(index.document("file:///etc/passwd").unwrap(), None);
        assert!(index.search("zebra", 10).unwrap().is_empty());
        // A document index is not a passage index, and the other way round.
        assert!(matches!(
            crate::PassageIndex::open(&indexes, "notes"),
            Err(SearchError::WrongKind { .. })
        ));
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = build_documents(&indexes, "none", &[empty], &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("no documents found"), "{err}");
        assert_eq!(crate::list(&indexes).len(), 1);
    }
}
