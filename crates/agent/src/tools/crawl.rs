//! `<crawl_page>`: each URL (` | `-separated; markdown links accepted) is read, turned into text
//! and summarised by a model against the last search query and the last thought, as the
//! reference does; the observation is `Page {i} [{url}] Summary:\n{summary}` per page, or
//! `Page {i} [{url}]: [Page content not accessible: {error}]`, joined by blank lines
//! (PROTOCOL.md §3).
//!
//! `file://` URLs (documents) and `zim://` URLs (articles of ZIM archives) are read only from the
//! local document index, from the text stored when the user indexed them: a model cannot read a
//! file the user did not index. http(s) pages go
//! through the fetcher, which refuses the machine's own and private addresses.

use super::{CallContext, Tool, ToolOutput};
use crate::summarize::{ChatModel, EndpointModel, PageToSummarize, summarize_page};
use catena_protocol::Tag;
use catena_search::DocumentIndex;
use catena_web::{ChatEndpoint, Fetcher};
use std::sync::Arc;
use std::time::Instant;

/// Pages one call may ask for; more are answered with a note (each page is a model call).
pub const MAX_PAGES_PER_CALL: usize = 5;

/// The page reader.
pub struct CrawlPageTool {
    /// Where `file://` documents and `zim://` articles are read from.
    local: Option<Arc<DocumentIndex>>,
    /// How http(s) pages are read; `None` in a run without network access.
    fetcher: Option<Fetcher>,
    /// The endpoint that summarises pages instead of the run's own model.
    summarizer: Option<Arc<ChatEndpoint>>,
}

impl CrawlPageTool {
    /// Pages are summarised by the run's model (the call's [`CallContext::model`]).
    pub fn new(local: Option<Arc<DocumentIndex>>, fetcher: Option<Fetcher>) -> CrawlPageTool {
        CrawlPageTool {
            local,
            fetcher,
            summarizer: None,
        }
    }

    /// Pages are summarised by the model at `endpoint` instead.
    pub fn with_summarizer(mut self, endpoint: Option<Arc<ChatEndpoint>>) -> CrawlPageTool {
        self.summarizer = endpoint;
        self
    }

    /// The page at `url` as (title, text), or why it cannot be read.
    fn read(&self, url: &str) -> Result<(Option<String>, String), String> {
        if url.starts_with("file:") || url.starts_with("zim:") {
            let Some(index) = &self.local else {
                return Err(
                    "local files and archive articles are read only from a local document \
                     index, and this run has none"
                        .into(),
                );
            };
            return match index.document(url) {
                Ok(Some(doc)) => Ok((Some(doc.title), doc.text)),
                Ok(None) => Err(format!(
                    "this {} is not in the local index `{}`; only indexed documents are read",
                    if url.starts_with("zim:") {
                        "article"
                    } else {
                        "file"
                    },
                    index.info.name
                )),
                Err(e) => Err(e.to_string()),
            };
        }
        let Some(fetcher) = &self.fetcher else {
            return Err("this run reads no web pages (offline)".into());
        };
        fetcher
            .fetch(url)
            .map(|page| (page.title, page.text))
            .map_err(|e| e.to_string())
    }
}

/// The URLs of a call: split at `|`, markdown links `[title](url)` and `<url>` unwrapped.
pub fn crawl_urls(input: &str) -> Vec<String> {
    input
        .split('|')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let target = part
                .rfind("](")
                .filter(|_| part.ends_with(')'))
                .map_or(part, |at| &part[at + 2..part.len() - 1]);
            target
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .trim_matches(|c| c == '"' || c == '\'' || c == '`')
                .to_string()
        })
        .filter(|url| !url.is_empty())
        .collect()
}

impl Tool for CrawlPageTool {
    fn tag(&self) -> Tag {
        Tag::CrawlPage
    }

    fn call(&self, input: &str, context: &mut CallContext<'_>) -> ToolOutput {
        let started = Instant::now();
        let urls = crawl_urls(input);
        if urls.is_empty() {
            return ToolOutput {
                observation: "The page reader needs addresses: write the URLs inside \
                              <crawl_page></crawl_page>, separated by ` | `."
                    .into(),
                success: false,
                elapsed: started.elapsed(),
            };
        }
        let mut pages = Vec::new();
        let mut summarised = 0;
        for (i, url) in urls.iter().enumerate() {
            let number = i + 1;
            if i >= MAX_PAGES_PER_CALL {
                pages.push(format!(
                    "Page {number} [{url}]: [Page content not accessible: at most \
                     {MAX_PAGES_PER_CALL} pages are read per call]"
                ));
                continue;
            }
            // A call the run has stopped waiting for reads no more pages.
            if let Some(why) = context.limits.interruption() {
                pages.push(format!(
                    "Page {number} [{url}]: [Page content not accessible: {}]",
                    why.reason()
                ));
                continue;
            }
            let (query, thought) = (context.last_search, context.last_think);
            let summary = self.read(url).and_then(|(title, text)| {
                let mut endpoint = self.summarizer.as_deref().map(EndpointModel);
                let model: &mut dyn ChatModel = match (&mut endpoint, context.model.as_deref_mut())
                {
                    (Some(endpoint), _) => endpoint,
                    (None, Some(own)) => own,
                    (None, None) => {
                        return Err("no model is there to summarise the page".to_string());
                    }
                };
                summarize_page(
                    model,
                    &PageToSummarize {
                        url,
                        title: title.as_deref(),
                        text: &text,
                        query,
                        thought,
                    },
                )
            });
            match summary {
                Ok(summary) => {
                    summarised += 1;
                    pages.push(format!(
                        "Page {number} [{url}] Summary:\n{}",
                        summary.trim()
                    ));
                }
                Err(error) => pages.push(format!(
                    "Page {number} [{url}]: [Page content not accessible: {error}]"
                )),
            }
        }
        ToolOutput {
            observation: pages.join("\n\n"),
            success: summarised > 0,
            elapsed: started.elapsed(),
        }
    }

    fn duplicate_notice(&self) -> Option<String> {
        Some(
            "These pages were already read; their summaries are above. Open other pages or \
             search again."
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarize::{ChatError, ChatModel};

    #[test]
    fn urls_are_split_and_unwrapped() {
        assert_eq!(
            crawl_urls(" https://a.org/x | [Tides](https://b.org/t?q=1) |<https://c.org>| "),
            ["https://a.org/x", "https://b.org/t?q=1", "https://c.org"]
        );
        assert!(crawl_urls(" | ").is_empty());
    }

    /// Keeps what it was asked; answers with how many questions it had.
    #[derive(Default)]
    struct Echo(Vec<String>);

    impl ChatModel for Echo {
        fn chat(&mut self, instruction: &str, _: usize) -> Result<String, ChatError> {
            self.0.push(instruction.to_string());
            Ok(format!("answer {}", self.0.len()))
        }
    }

    #[test]
    fn files_are_read_only_from_the_index_and_each_page_gets_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().canonicalize().unwrap().join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("tides.md"), "# Tides\nHigh water at 06:12.").unwrap();
        let indexes = dir.path().join("indexes");
        catena_search::build_documents(&indexes, "docs", std::slice::from_ref(&docs), &mut |_| {})
            .unwrap();
        let index = Arc::new(DocumentIndex::open(&indexes, "docs").unwrap());
        let tool = CrawlPageTool::new(Some(index), None);
        let indexed = url::Url::from_file_path(docs.join("tides.md")).unwrap();
        let input = format!("{indexed} | file:///etc/passwd | https://example.org/");
        let mut echo = Echo::default();
        let mut context = CallContext {
            last_think: Some("find the tide"),
            last_search: Some("tide times"),
            model: Some(&mut echo),
            ..CallContext::default()
        };
        let output = tool.call(&input, &mut context);
        assert!(output.success);
        assert_eq!(
            output.observation,
            format!(
                "Page 1 [{indexed}] Summary:\nanswer 2\n\n\
                 Page 2 [file:///etc/passwd]: [Page content not accessible: this file is not in the local index `docs`; only indexed documents are read]\n\n\
                 Page 3 [https://example.org/]: [Page content not accessible: this run reads no web pages (offline)]"
            )
        );
        // The thought became the intent; the page was summarised against the query and it.
        assert!(echo.0[0].contains("find the tide"));
        assert!(echo.0[1].contains("High water at 06:12."));
        assert!(echo.0[1].contains("The agent's search query: tide times"));
        assert!(echo.0[1].contains("What the agent is looking for: answer 1"));
    }

    #[test]
    fn a_stopped_run_reads_no_more_pages() {
        let tool = CrawlPageTool::new(None, None);
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut context = CallContext {
            limits: crate::tools::CallLimits {
                deadline: None,
                cancel: Some(cancel),
            },
            ..CallContext::default()
        };
        let output = tool.call("https://a.org/ | https://b.org/", &mut context);
        assert!(!output.success);
        assert_eq!(
            output.observation,
            "Page 1 [https://a.org/]: [Page content not accessible: the run was cancelled]\n\n\
             Page 2 [https://b.org/]: [Page content not accessible: the run was cancelled]"
        );
    }
}
