//! Tools a trajectory can call. One trait; the agent runner looks tools up by their tag.

mod code;
mod crawl;
mod observation;
mod watch;
mod web;
mod wiki;

pub use code::{CodeTool, code_observation, run_program};
pub use crawl::{CrawlPageTool, MAX_PAGES_PER_CALL, crawl_urls};
pub use observation::{OBSERVATION_LIMIT, SEARCH_ALREADY_DONE, cut_observation, no_results};
pub use watch::{CallLimits, Interruption, WatchedCall, call_watched};
pub use web::{WEB_RESULTS, WebSearchTool, add_web_tools, web_observation};
pub use wiki::{WIKI_TOP_K, WikiSearchTool, add_wiki_search, wiki_observation};

use catena_protocol::Tag;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What a tool call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The observation text, exactly as the model will read it.
    pub observation: String,
    /// Whether the tool did what was asked (a program that exited 0, a search with results).
    pub success: bool,
    pub elapsed: Duration,
}

/// What a tool may know of the run before its call: the page reader summarises with the run's
/// model against the last search and the last thought (PROTOCOL.md §3).
#[derive(Default)]
pub struct CallContext<'a> {
    /// The content of the last `<think>` block.
    pub last_think: Option<&'a str>,
    /// The query of the last `<web_search>`.
    pub last_search: Option<&'a str>,
    /// The run's model, answering beside the run's context.
    pub model: Option<&'a mut dyn crate::summarize::ChatModel>,
    /// The run's deadline and cancel flag: a tool that can stop early (the sandbox) stops
    /// there; [`call_watched`] stops waiting for any tool there.
    pub limits: CallLimits,
}

/// A tool the model calls with a tag.
pub trait Tool: Send + Sync {
    fn tag(&self) -> Tag;

    /// Runs the call. `input` is the block's raw content.
    fn call(&self, input: &str, context: &mut CallContext<'_>) -> ToolOutput;

    /// For tools where repeating an identical call is wasted effort (searches, crawls), the
    /// observation to give instead of running it again (PROTOCOL.md §2, step 6).
    fn duplicate_notice(&self) -> Option<String> {
        None
    }
}

/// A tool the profile names but this runtime cannot provide (no search backend configured,
/// say): every call gets an observation that says so.
pub struct UnavailableTool {
    pub tag: Tag,
    pub reason: String,
}

impl Tool for UnavailableTool {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn call(&self, _input: &str, _context: &mut CallContext<'_>) -> ToolOutput {
        ToolOutput {
            observation: format!(
                "The {} tool is not available here: {}",
                self.tag, self.reason
            ),
            success: false,
            elapsed: Duration::ZERO,
        }
    }
}

/// The tools of `profile`: `<code>` runs in the sandbox `sandbox` gives (asked only when the
/// profile has code); every other tool starts as one that answers each call with why it is not
/// there, until the command adds it (`add_wiki_search`, `add_web_tools`).
pub fn profile_tools<E>(
    profile: &catena_protocol::Profile,
    sandbox: impl FnOnce() -> Result<std::sync::Arc<catena_sandbox::Sandbox>, E>,
) -> Result<ToolBox, E> {
    let mut tools = ToolBox::new();
    let mut sandbox = Some(sandbox);
    for &tag in &profile.tools {
        match (tag, sandbox.take()) {
            (Tag::Code, Some(make)) => tools.add(Box::new(CodeTool::new(make()?))),
            _ => tools.add(Box::new(UnavailableTool {
                tag,
                reason: unavailable_reason(tag).into(),
            })),
        }
    }
    Ok(tools)
}

/// Why a tool is not there.
pub fn unavailable_reason(tag: Tag) -> &'static str {
    match tag {
        Tag::WebSearch => {
            "no search backend is set up: build a local document index with `catena index add \
             FOLDER` (Markdown, text, HTML and PDF files, ZIM archives), or choose an online backend with --search \
             (searxng, serper, brave, tavily)"
        }
        Tag::CrawlPage => {
            "pages are not read in this command (catena run, eval and serve read them)"
        }
        Tag::WikiSearch => {
            "no passage index is chosen: build one with `catena index add FILE` (a JSONL file of \
             passages, such as the wiki-18 corpus) and run with --wiki-index NAME"
        }
        Tag::ToolCall => {
            "no MCP server is listed: name an mcp.json with --mcp-config FILE, or put one in \
             Catena's data folder"
        }
        _ => "no vision model is configured",
    }
}

/// The tools of a run, by tag. Shared, so that a call can run on a thread of its own
/// ([`call_watched`]) and be left there when the run stops first.
#[derive(Default)]
pub struct ToolBox {
    tools: HashMap<Tag, Arc<dyn Tool + 'static>>,
}

impl ToolBox {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, tool: Box<dyn Tool + 'static>) {
        self.tools.insert(tool.tag(), Arc::from(tool));
    }

    pub fn get(&self, tag: Tag) -> Option<&dyn Tool> {
        self.tools.get(&tag).map(|t| t.as_ref())
    }

    /// The tool for `tag`, to run on a thread of its own ([`call_watched`]).
    pub fn shared(&self, tag: Tag) -> Option<Arc<dyn Tool + 'static>> {
        self.tools.get(&tag).cloned()
    }
}
