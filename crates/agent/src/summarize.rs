//! The page summariser `<crawl_page>` uses, as the reference does (PROTOCOL.md §3): the agent's
//! last thought is first turned into what it hopes to find on the page (its intent), then the page
//! is summarised against the last search query and that intent into query-related information,
//! clue-related information and relevant links, or "No relevant information". The model is the
//! run's own, in a session of its own, so the agent's context never holds the raw page.

use catena_engine::llama::LlamaEngine;
use catena_engine::{
    EngineError, GenerateLimits, SamplingParams, Session, SessionOptions, StopMatcher,
};
use catena_protocol::profile::QWEN_SYSTEM;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A page to summarise and what the agent was after.
#[derive(Debug, Clone, Copy)]
pub struct PageToSummarize<'a> {
    pub url: &'a str,
    pub title: Option<&'a str>,
    pub text: &'a str,
    /// The last `<web_search>` query.
    pub query: Option<&'a str>,
    /// The last `<think>`.
    pub thought: Option<&'a str>,
}

/// Turns a page into what the agent reads of it.
pub trait PageSummarizer: Send + Sync {
    /// The summary, or why there is none (the page reader shows it as the page's error).
    fn summarize(&self, page: &PageToSummarize<'_>) -> Result<String, String>;
}

/// Why a chat call gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatError {
    /// The prompt does not fit the model's context with room for the answer.
    TooLong,
    Failed(String),
}

/// One instruction in, one answer out: the model calls the summariser makes.
pub trait ChatModel: Send + Sync {
    fn chat(&self, instruction: &str, max_tokens: usize) -> Result<String, ChatError>;
}

/// Tokens the intent may take.
const INTENT_TOKENS: usize = 160;
/// Tokens the summary may take.
const SUMMARY_TOKENS: usize = 640;
/// Characters of the page given to the model at most (about 3,000 tokens of English); a
/// longer page is cut, and the prompt says so.
pub const PAGE_CHARS: usize = 12_000;

/// The summariser over a chat model.
pub struct ModelSummarizer {
    model: Box<dyn ChatModel>,
}

impl ModelSummarizer {
    pub fn new(model: Box<dyn ChatModel>) -> ModelSummarizer {
        ModelSummarizer { model }
    }

    fn intent(&self, thought: &str) -> Result<String, ChatError> {
        let instruction = format!(
            "An agent wrote the reasoning below just before it chose to open a web page. In one \
             or two sentences, say what it hopes to find there: the fact it is after and the \
             clues it follows. Write only those sentences.\n\nReasoning:\n{}",
            cut_chars(thought, 4_000).0
        );
        self.model.chat(&instruction, INTENT_TOKENS)
    }
}

/// The summary instruction for `page`, its text cut to `page_chars`.
pub fn summary_instruction(
    page: &PageToSummarize<'_>,
    intent: Option<&str>,
    page_chars: usize,
) -> String {
    let (text, cut) = cut_chars(page.text, page_chars);
    let mut instruction = String::from(
        "You read web pages for a research agent. Extract from the page below what helps it.\n\n",
    );
    if let Some(query) = page.query {
        instruction.push_str(&format!("The agent's search query: {query}\n"));
    }
    if let Some(intent) = intent {
        instruction.push_str(&format!(
            "What the agent is looking for: {}\n",
            intent.trim()
        ));
    }
    instruction.push_str(
        "\nWrite three parts:\n\
         1. Query-related information: what the page says that answers or bears on the query, \
         with names, numbers and dates exactly as the page gives them.\n\
         2. Clue-related information: what else on the page helps with what the agent is \
         looking for.\n\
         3. Relevant links: links on the page worth opening next, as markdown links with \
         their full addresses.\n\
         If the page holds nothing relevant, write only: No relevant information\n\n",
    );
    let title = page.title.map(|t| format!(" \"{t}\"")).unwrap_or_default();
    instruction.push_str(&format!("The page{title} ({}):\n{text}", page.url));
    if cut {
        instruction.push_str("\n[the rest of the page is not shown]");
    }
    instruction
}

impl PageSummarizer for ModelSummarizer {
    fn summarize(&self, page: &PageToSummarize<'_>) -> Result<String, String> {
        if page.text.trim().is_empty() {
            return Err("the page has no text".into());
        }
        let failed = |e: ChatError| match e {
            ChatError::TooLong => "the summariser's context is too small for this page".to_string(),
            ChatError::Failed(reason) => format!("the summariser failed: {reason}"),
        };
        let intent = match page.thought.filter(|t| !t.trim().is_empty()) {
            Some(thought) => Some(self.intent(thought).map_err(failed)?),
            None => None,
        };
        // A page whose words take more tokens than usual (code, other scripts) gets less text.
        let mut page_chars = PAGE_CHARS;
        loop {
            let instruction = summary_instruction(page, intent.as_deref(), page_chars);
            match self.model.chat(&instruction, SUMMARY_TOKENS) {
                Err(ChatError::TooLong) if page_chars > 1_000 => page_chars /= 2,
                Err(e) => return Err(failed(e)),
                Ok(summary) if summary.trim().is_empty() => {
                    return Err("the summariser wrote nothing".into());
                }
                Ok(summary) => return Ok(clean_summary(&summary, page)),
            }
        }
    }
}

/// The summary without what a small model adds that is not so: a line it repeats is kept once,
/// and a line naming an address the page does not hold is dropped (the agent would open an
/// invented link next).
pub fn clean_summary(summary: &str, page: &PageToSummarize<'_>) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    for line in summary.trim().lines() {
        let trimmed = line.trim();
        if !trimmed.is_empty() && !seen.insert(trimmed.to_string()) {
            continue;
        }
        let invented =
            addresses(trimmed).any(|address| address != page.url && !page.text.contains(address));
        if !invented {
            kept.push(line);
        }
    }
    kept.join("\n").trim().to_string()
}

/// The web and file addresses in `line`, without the punctuation that ends a sentence or a
/// markdown link around them.
fn addresses(line: &str) -> impl Iterator<Item = &str> {
    ["https://", "http://", "file://"]
        .into_iter()
        .flat_map(move |scheme| {
            line.match_indices(scheme).map(move |(at, _)| {
                let rest = &line[at..];
                let end = rest
                    .find(|c: char| {
                        c.is_whitespace() || matches!(c, ')' | ']' | '>' | '"' | '\'' | '`')
                    })
                    .unwrap_or(rest.len());
                rest[..end].trim_end_matches(['.', ',', ';', ':'])
            })
        })
}

/// The first `limit` characters of `text`, and whether it was cut.
fn cut_chars(text: &str, limit: usize) -> (&str, bool) {
    match text.char_indices().nth(limit) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

/// The run's own model, in a fresh session per call: greedy, so a page summarises the same way
/// every time.
pub struct LocalChat {
    engine: Arc<LlamaEngine>,
    options: SessionOptions,
}

impl LocalChat {
    /// Context of the summariser's session: the page, the instruction and the answer.
    pub const CONTEXT: u32 = 8_192;

    pub fn new(engine: Arc<LlamaEngine>, threads: Option<i32>) -> LocalChat {
        LocalChat {
            engine,
            options: SessionOptions {
                context_size: Some(Self::CONTEXT),
                sampling: SamplingParams {
                    temperature: 0.0,
                    ..SamplingParams::default()
                },
                threads,
                ..SessionOptions::default()
            },
        }
    }
}

impl ChatModel for LocalChat {
    fn chat(&self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
        let failed = |e: EngineError| ChatError::Failed(e.to_string());
        let prompt = self
            .engine
            .chat_prompt(QWEN_SYSTEM, instruction)
            .map_err(failed)?;
        let ids = self.engine.tokenize_parts(&prompt);
        let context = self.options.context_size.unwrap_or(Self::CONTEXT) as usize;
        if ids.len() + max_tokens > context {
            return Err(ChatError::TooLong);
        }
        let mut session = self.engine.session(&self.options).map_err(failed)?;
        session.start_prompt(&ids).map_err(failed)?;
        let mut text = String::new();
        // A small model can fall into repeating one line; the third time ends the answer.
        let looping = Arc::new(AtomicBool::new(false));
        let limits = GenerateLimits {
            cancel: Some(looping.clone()),
            ..GenerateLimits::tokens(max_tokens)
        };
        session
            .generate(
                &StopMatcher::new(Vec::<String>::new()),
                limits,
                &mut |piece| {
                    text.push_str(piece);
                    if piece.contains('\n') && repeats_a_line(&text, 3) {
                        looping.store(true, Ordering::Relaxed);
                    }
                },
            )
            .map_err(failed)?;
        Ok(text)
    }
}

/// Whether a complete non-empty line of `text` occurs `times` times.
fn repeats_a_line(text: &str, times: usize) -> bool {
    let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
    let mut counts = std::collections::HashMap::new();
    complete
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .any(|line| {
            let count = counts.entry(line).or_insert(0);
            *count += 1;
            *count >= times
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records instructions; answers `TooLong` while they are longer than `fits`.
    struct Recorder {
        seen: Mutex<Vec<String>>,
        fits: usize,
    }

    impl ChatModel for Recorder {
        fn chat(&self, instruction: &str, _max_tokens: usize) -> Result<String, ChatError> {
            self.seen.lock().unwrap().push(instruction.to_string());
            if instruction.chars().count() > self.fits {
                return Err(ChatError::TooLong);
            }
            Ok(format!(" answer {} \n", self.seen.lock().unwrap().len()))
        }
    }

    #[test]
    fn the_thought_becomes_an_intent_and_a_long_page_is_cut_until_it_fits() {
        let recorder = Arc::new(Recorder {
            seen: Mutex::new(Vec::new()),
            fits: 5_000,
        });
        struct Shared(Arc<Recorder>);
        impl ChatModel for Shared {
            fn chat(&self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
                self.0.chat(instruction, max_tokens)
            }
        }
        let summarizer = ModelSummarizer::new(Box::new(Shared(recorder.clone())));
        let text = "word ".repeat(4_000);
        let page = PageToSummarize {
            url: "https://example.org/t",
            title: Some("Tides"),
            text: &text,
            query: Some("tide times"),
            thought: Some("I need the high water time."),
        };
        let summary = summarizer.summarize(&page).unwrap();
        let seen = recorder.seen.lock().unwrap();
        // Intent, then the summary at 12,000 characters, 6,000, then 3,000.
        assert_eq!(
            seen.len(),
            4,
            "{:?}",
            seen.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(summary, "answer 4");
        assert!(seen[0].contains("I need the high water time."));
        let last = &seen[3];
        assert!(last.contains("The agent's search query: tide times"));
        assert!(last.contains("What the agent is looking for: answer 1"));
        assert!(last.contains("The page \"Tides\" (https://example.org/t):"));
        assert!(last.ends_with("[the rest of the page is not shown]"));
        assert!(last.contains("No relevant information"));
    }

    #[test]
    fn repeated_lines_and_invented_links_are_dropped() {
        let page = PageToSummarize {
            url: "file:///docs/tides.md",
            title: None,
            text: "High water at 06:52. See https://tides.example/north for more.",
            query: None,
            thought: None,
        };
        let summary = [
            "1. High water: 06:52.",
            "3. Links:",
            " - [north](https://tides.example/north).",
            " - https://invented.example/x",
            " - https://tides.example/north",
            " - file:///docs/tides.md",
            "",
            " - https://tides.example/north",
        ]
        .join("\n");
        assert_eq!(
            clean_summary(&summary, &page),
            [
                "1. High water: 06:52.",
                "3. Links:",
                " - [north](https://tides.example/north).",
                " - https://tides.example/north",
                " - file:///docs/tides.md",
            ]
            .join("\n")
        );
        assert!(repeats_a_line("a\nb\na\n\na\n", 3));
        assert!(
            !repeats_a_line("a\nb\na\na", 3),
            "the last line is not complete yet"
        );
    }

    #[test]
    fn an_empty_page_is_not_sent_to_the_model() {
        let summarizer = ModelSummarizer::new(Box::new(Recorder {
            seen: Mutex::new(Vec::new()),
            fits: 0,
        }));
        let page = PageToSummarize {
            url: "u",
            title: None,
            text: " \n",
            query: None,
            thought: None,
        };
        assert_eq!(
            summarizer.summarize(&page).unwrap_err(),
            "the page has no text"
        );
    }
}
