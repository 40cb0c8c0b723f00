//! The page summariser `<crawl_page>` uses, as the reference does (PROTOCOL.md §3): the agent's
//! last thought is first turned into what it hopes to find on the page (its intent), then the page
//! is summarised against the last search query and that intent into query-related information,
//! clue-related information and relevant links, or "No relevant information". The model is the
//! run's own, answering in a context of its own ([`SideModel`]), so the agent's context never
//! holds the raw page, or one at an endpoint the user configured ([`EndpointModel`]).

use catena_engine_api::{EngineError, Session, SideChat};
use catena_protocol::profile::QWEN_SYSTEM;

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

/// Why a chat call gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatError {
    /// The prompt does not fit the model's context with room for the answer.
    TooLong,
    Failed(String),
}

/// One instruction in, one answer out: the model calls the summariser makes.
pub trait ChatModel {
    fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError>;
}

/// The run's own model, answering beside the run's session ([`Session::side_chat`]): the
/// summariser's instructions and the page never enter the agent's context.
pub struct SideModel<'s>(pub &'s mut dyn Session);

impl ChatModel for SideModel<'_> {
    fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
        let chat = SideChat {
            system: QWEN_SYSTEM.to_string(),
            user: instruction.to_string(),
            max_tokens,
        };
        self.0.side_chat(&chat).map_err(|e| match e {
            EngineError::ContextOverflow { .. } => ChatError::TooLong,
            e => ChatError::Failed(e.to_string()),
        })
    }
}

/// A model at an OpenAI-compatible endpoint the user configured (`summarizer_url` in the
/// `[web]` settings): the page goes there instead of to the run's own model.
pub struct EndpointModel<'e>(pub &'e catena_web::ChatEndpoint);

impl ChatModel for EndpointModel<'_> {
    fn chat(&mut self, instruction: &str, max_tokens: usize) -> Result<String, ChatError> {
        self.0
            .chat("You are a helpful assistant.", instruction, max_tokens)
            .map_err(|e| match e {
                catena_web::EndpointError::TooLong(_) => ChatError::TooLong,
                e => ChatError::Failed(e.to_string()),
            })
    }
}

/// Tokens the intent may take.
const INTENT_TOKENS: usize = 160;
/// Tokens the summary may take.
const SUMMARY_TOKENS: usize = 640;
/// Characters of the page given to the model at most (about 3,000 tokens of English); a
/// longer page is cut, and the prompt says so.
pub const PAGE_CHARS: usize = 12_000;

/// What the agent's last thought hopes to find on a page, in the model's words.
fn intent(model: &mut dyn ChatModel, thought: &str) -> Result<String, ChatError> {
    let instruction = format!(
        "An agent wrote the reasoning below just before it chose to open a web page. In one \
         or two sentences, say what it hopes to find there: the fact it is after and the \
         clues it follows. Write only those sentences.\n\nReasoning:\n{}",
        cut_chars(thought, 4_000).0
    );
    model.chat(&instruction, INTENT_TOKENS)
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

/// Summarises `page` with `model`: the thought into an intent (when there is a thought), then
/// the page against the query and the intent. The error is what the observation shows.
pub fn summarize_page(
    model: &mut dyn ChatModel,
    page: &PageToSummarize<'_>,
) -> Result<String, String> {
    if page.text.trim().is_empty() {
        return Err("the page has no text".into());
    }
    let failed = |e: ChatError| match e {
        ChatError::TooLong => "the summariser's context is too small for this page".to_string(),
        ChatError::Failed(reason) => format!("the summariser failed: {reason}"),
    };
    let intent = match page.thought.filter(|t| !t.trim().is_empty()) {
        Some(thought) => Some(intent(model, thought).map_err(failed)?),
        None => None,
    };
    // A page whose words take more tokens than usual (code, other scripts) gets less text.
    let mut page_chars = PAGE_CHARS;
    loop {
        let instruction = summary_instruction(page, intent.as_deref(), page_chars);
        match model.chat(&instruction, SUMMARY_TOKENS) {
            Err(ChatError::TooLong) if page_chars > 1_000 => page_chars /= 2,
            Err(e) => return Err(failed(e)),
            Ok(summary) if summary.trim().is_empty() => {
                return Err("the summariser wrote nothing".into());
            }
            Ok(summary) => return Ok(clean_summary(&summary, page)),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records instructions; answers `TooLong` while they are longer than `fits`.
    struct Recorder {
        seen: Vec<String>,
        fits: usize,
    }

    impl ChatModel for Recorder {
        fn chat(&mut self, instruction: &str, _max_tokens: usize) -> Result<String, ChatError> {
            self.seen.push(instruction.to_string());
            if instruction.chars().count() > self.fits {
                return Err(ChatError::TooLong);
            }
            Ok(format!(" answer {} \n", self.seen.len()))
        }
    }

    #[test]
    fn the_thought_becomes_an_intent_and_a_long_page_is_cut_until_it_fits() {
        let mut recorder = Recorder {
            seen: Vec::new(),
            fits: 5_000,
        };
        let text = "word ".repeat(4_000);
        let page = PageToSummarize {
            url: "https://example.org/t",
            title: Some("Tides"),
            text: &text,
            query: Some("tide times"),
            thought: Some("I need the high water time."),
        };
        let summary = summarize_page(&mut recorder, &page).unwrap();
        let seen = &recorder.seen;
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
    }

    #[test]
    fn an_empty_page_is_not_sent_to_the_model() {
        let mut recorder = Recorder {
            seen: Vec::new(),
            fits: 0,
        };
        let page = PageToSummarize {
            url: "u",
            title: None,
            text: " \n",
            query: None,
            thought: None,
        };
        assert_eq!(
            summarize_page(&mut recorder, &page).unwrap_err(),
            "the page has no text"
        );
        assert!(recorder.seen.is_empty());
    }
}
