//! `<wiki_search>`: BM25 over a local passage index, the top three passages as
//! `Doc {k} (Title: {title})\n{text}` joined by blank lines (docs/PROTOCOL.md §3).

use super::observation::search_call;
use super::{CallContext, SEARCH_ALREADY_DONE, Tool, ToolBox, ToolOutput};
use catena_protocol::{Profile, Tag};
use catena_search::{Hit, PassageIndex, SearchError};
use std::path::Path;
use std::sync::Arc;

/// Passages per observation, as the multi-hop QA agents were trained.
pub const WIKI_TOP_K: usize = 3;

/// The wiki search over one passage index.
pub struct WikiSearchTool {
    index: Arc<PassageIndex>,
}

impl WikiSearchTool {
    pub fn new(index: Arc<PassageIndex>) -> WikiSearchTool {
        WikiSearchTool { index }
    }
}

/// Gives `tools` the wiki search when `profile` uses it and a passage index is chosen (`chosen`
/// by name, or the only one in `indexes_dir`); otherwise the profile's tool stays the one that
/// says how to build or choose an index.
pub fn add_wiki_search(
    tools: &mut ToolBox,
    profile: &Profile,
    indexes_dir: &Path,
    chosen: Option<&str>,
) -> Result<(), SearchError> {
    if !profile.tools.contains(&Tag::WikiSearch) {
        return Ok(());
    }
    if let Some(index) = PassageIndex::choose(indexes_dir, chosen)? {
        tools.add(Box::new(WikiSearchTool::new(Arc::new(index))));
    }
    Ok(())
}

/// The observation for `hits` of `query`.
pub fn wiki_observation(query: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return super::no_results(query);
    }
    hits.iter()
        .enumerate()
        .map(|(k, hit)| format!("Doc {} (Title: {})\n{}", k + 1, hit.title, hit.text))
        .collect::<Vec<_>>()
        .join("\n\n")
}

impl Tool for WikiSearchTool {
    fn tag(&self) -> Tag {
        Tag::WikiSearch
    }

    fn call(&self, input: &str, _context: &mut CallContext<'_>) -> ToolOutput {
        search_call(input, Tag::WikiSearch, |query| {
            match self.index.search(query, WIKI_TOP_K) {
                Ok(hits) => (wiki_observation(query, &hits), !hits.is_empty()),
                Err(e) => (format!("The wiki search failed: {e}"), false),
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

    fn hit(title: &str, text: &str) -> Hit {
        Hit {
            id: String::new(),
            title: title.into(),
            text: text.into(),
            score: 1.0,
        }
    }

    #[test]
    fn hits_are_numbered_docs_joined_by_blank_lines() {
        let hits = [hit("\"Ada\"", "first"), hit("\"Engine\"", "second\nline")];
        assert_eq!(
            wiki_observation("q", &hits),
            "Doc 1 (Title: \"Ada\")\nfirst\n\nDoc 2 (Title: \"Engine\")\nsecond\nline"
        );
        assert!(wiki_observation("zebra", &[]).starts_with("No results found for query: 'zebra'"));
    }
}
