//! `<web_search>`: a query to the run's search backend (the local document index by default),
//! ten hits rendered exactly as the web agents were trained to read them (PROTOCOL.md §3).

use super::observation::search_call;
use super::{
    CallContext, CrawlPageTool, SEARCH_ALREADY_DONE, Tool, ToolBox, ToolOutput, no_results,
};
use catena_protocol::{Profile, Tag};
use catena_web::{FetchError, FetchOptions, Fetcher, SearchBackend, WebHit, WebSetup};
use std::sync::Arc;

/// Gives `tools` the web tools `profile` uses: `<web_search>` over `setup`'s backend, and
/// `<crawl_page>` reading indexed documents (and web pages when `setup` is online), each page
/// summarised by the run's own model or the endpoint the settings name. A search with nothing behind it stays the tool that says
/// how to set one up.
pub fn add_web_tools(
    tools: &mut ToolBox,
    profile: &Profile,
    setup: &WebSetup,
    fetch: FetchOptions,
) -> Result<(), FetchError> {
    if profile.tools.contains(&Tag::WebSearch)
        && let Some(backend) = &setup.backend
    {
        tools.add(Box::new(WebSearchTool::new(backend.clone())));
    }
    if profile.tools.contains(&Tag::CrawlPage) {
        let fetcher = if setup.online {
            Some(Fetcher::new(fetch)?)
        } else {
            None
        };
        tools.add(Box::new(
            CrawlPageTool::new(setup.local_index.clone(), fetcher)
                .with_summarizer(setup.summarizer.clone()),
        ));
    }
    Ok(())
}

/// Hits per search, as the reference's search proxy returned.
pub const WEB_RESULTS: usize = 10;

/// The observation for `hits` of `query`: `Found {n} results:\n\n## Web Results\n`, then per hit
/// `{i}. [{title}]({url})`, `\nDate published: {date}` and `\nSource: {source}` when known, and
/// `\n{url}\n{snippet}\n\n`.
pub fn web_observation(query: &str, hits: &[WebHit]) -> String {
    if hits.is_empty() {
        return no_results(query);
    }
    let mut text = format!("Found {} results:\n\n## Web Results\n", hits.len());
    for (i, hit) in hits.iter().enumerate() {
        text.push_str(&format!("{}. [{}]({})", i + 1, hit.title, hit.url));
        if let Some(date) = &hit.date {
            text.push_str(&format!("\nDate published: {date}"));
        }
        if let Some(source) = &hit.source {
            text.push_str(&format!("\nSource: {source}"));
        }
        text.push_str(&format!("\n{}\n{}\n\n", hit.url, hit.snippet));
    }
    text
}

/// The web search over one backend.
pub struct WebSearchTool {
    backend: Arc<dyn SearchBackend>,
}

impl WebSearchTool {
    pub fn new(backend: Arc<dyn SearchBackend>) -> WebSearchTool {
        WebSearchTool { backend }
    }
}

impl Tool for WebSearchTool {
    fn tag(&self) -> Tag {
        Tag::WebSearch
    }

    fn call(&self, input: &str, _context: &mut CallContext<'_>) -> ToolOutput {
        search_call(input, Tag::WebSearch, |query| {
            match self.backend.search(query, WEB_RESULTS) {
                Ok(hits) => (web_observation(query, &hits), !hits.is_empty()),
                Err(failure) => (format!("The web search failed: {failure}"), false),
            }
        })
    }

    fn duplicate_notice(&self) -> Option<String> {
        Some(SEARCH_ALREADY_DONE.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(title: &str, date: Option<&str>, source: Option<&str>) -> WebHit {
        WebHit {
            title: title.into(),
            url: format!("https://example.org/{title}"),
            snippet: format!("about {title}"),
            date: date.map(str::to_string),
            source: source.map(str::to_string),
        }
    }

    #[test]
    fn hits_are_rendered_as_the_protocol_says() {
        let hits = [
            hit("a", Some("2024-01-02"), None),
            hit("b", None, Some("wikipedia")),
        ];
        assert_eq!(
            web_observation("q", &hits),
            "Found 2 results:\n\n## Web Results\n\
             1. [a](https://example.org/a)\nDate published: 2024-01-02\nhttps://example.org/a\nabout a\n\n\
             2. [b](https://example.org/b)\nSource: wikipedia\nhttps://example.org/b\nabout b\n\n"
        );
        assert_eq!(
            web_observation("zebra", &[]),
            "No results found for query: 'zebra'. Use a less specific query."
        );
    }
}
