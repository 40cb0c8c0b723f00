//! Prompt profiles: the instruction text, enabled tools, answer format and budget of one kind of
//! task (PROTOCOL.md §4). Profiles are data files, so a user can drop in the exact text published
//! with a checkpoint (`--profile-file`).

use super::tag::{Tag, TagKind};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The system message the released checkpoints were trained with (Qwen's default).
pub const QWEN_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// The placeholder in `user_template` that the task text replaces.
pub const QUESTION_PLACEHOLDER: &str = "{question}";

/// The profiles shipped with Catena, as (name, TOML text).
const BUILTIN: [(&str, &str); 5] = [
    ("code", include_str!("profiles/code.toml")),
    ("math", include_str!("profiles/math.toml")),
    ("web", include_str!("profiles/web.toml")),
    ("mhqa", include_str!("profiles/mhqa.toml")),
    ("all-tools", include_str!("profiles/all-tools.toml")),
];

/// How the final answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerFormat {
    /// `\boxed{...}` (math).
    Boxed,
    /// One fenced Python program (code).
    Program,
    /// A short string (web, all-tools).
    Short,
    /// Short strings separated by `|` (multi-hop QA).
    Multi,
}

/// One prompt profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The system message; Qwen's default unless the file says otherwise.
    #[serde(default = "default_system")]
    pub system: String,
    /// The tool tags this profile enables.
    pub tools: Vec<Tag>,
    pub answer: AnswerFormat,
    /// The reference budget of tool calls (PROTOCOL.md §2, step 4).
    pub max_tool_calls: u32,
    /// The user message; `{question}` is replaced by the task.
    pub user_template: String,
    /// The role blocks a chain opens with, in order (the code profile's one `<plan>`); the
    /// protocol's grammar holds the model to them (PROTOCOL.md §8).
    #[serde(default)]
    pub opens_with: Vec<Tag>,
}

fn default_system() -> String {
    QWEN_SYSTEM.to_string()
}

/// A profile that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("unknown profile `{0}` (available: code, math, web, mhqa, all-tools)")]
    Unknown(String),
    #[error("cannot read profile file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {origin} is not valid TOML for a profile: {message}")]
    Syntax { origin: String, message: String },
    #[error("profile {origin}: {problem}")]
    Invalid { origin: String, problem: String },
}

impl Profile {
    /// The names of the shipped profiles.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(name, _)| *name)
    }

    /// A shipped profile by name.
    pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
        let (_, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| ProfileError::Unknown(name.to_string()))?;
        Profile::from_toml(text, &format!("`{name}`"))
    }

    /// A user's profile file.
    pub fn from_file(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Profile::from_toml(&text, &path.display().to_string())
    }

    /// Parse and check a profile; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        let profile: Profile = toml::from_str(text).map_err(|e| ProfileError::Syntax {
            origin: origin.to_string(),
            message: e.message().to_string(),
        })?;
        profile.check().map_err(|problem| ProfileError::Invalid {
            origin: origin.to_string(),
            problem,
        })?;
        Ok(profile)
    }

    fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` is empty".into());
        }
        if let Some(tag) = self.tools.iter().find(|t| !t.is_tool()) {
            return Err(format!("`tools` lists <{tag}>, which is not a tool"));
        }
        if let Some(tag) = self
            .opens_with
            .iter()
            .find(|t| t.kind() != TagKind::Role || !self.user_template.contains(&t.open()))
        {
            return Err(format!(
                "`opens_with` lists <{tag}>, which is not a role block the instructions describe"
            ));
        }
        if !self.user_template.contains(QUESTION_PLACEHOLDER) {
            return Err(format!(
                "`user_template` has no {QUESTION_PLACEHOLDER} placeholder"
            ));
        }
        Ok(())
    }

    /// The user message for a task.
    pub fn user_message(&self, question: &str) -> String {
        self.user_template.replace(QUESTION_PLACEHOLDER, question)
    }

    /// The user message up to the question: the same for every task of the profile.
    pub fn user_preamble(&self) -> &str {
        self.user_template
            .split(QUESTION_PLACEHOLDER)
            .next()
            .unwrap_or_default()
    }

    /// The stop strings of a generation (PROTOCOL.md §2, step 2): the closing tag of every enabled
    /// tool, then `</answer>`. The end-of-turn token is the engine's business.
    pub fn stop_strings(&self) -> Vec<String> {
        let mut stops: Vec<String> = self.tools.iter().map(|t| t.close()).collect();
        stops.push(Tag::Answer.close());
        stops
    }

    pub fn enables(&self, tag: Tag) -> bool {
        self.tools.contains(&tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_loads() {
        for name in Profile::builtin_names() {
            let profile = Profile::builtin(name).unwrap();
            assert_eq!(profile.name, name);
            assert_eq!(profile.system, QWEN_SYSTEM);
            assert!(!profile.tools.is_empty());
            let user = profile.user_message("QUESTION-TEXT");
            assert!(user.contains("QUESTION-TEXT"));
            // The part every task shares ends where the question begins.
            let preamble = profile.user_preamble();
            assert!(user.starts_with(preamble), "{name}");
            assert!(
                user[preamble.len()..].starts_with("QUESTION-TEXT"),
                "{name}"
            );
            assert!(!user.contains(QUESTION_PLACEHOLDER));
            for tool in &profile.tools {
                assert!(
                    user.contains(&tool.open()),
                    "{name} does not describe <{tool}>"
                );
            }
            assert!(user.contains("<answer>"));
        }
    }

    #[test]
    fn question_insertion_follows_the_spec() {
        let math = Profile::builtin("math").unwrap();
        assert!(math.user_message("Q").ends_with("\n\nTask:\nQ"));
        assert!(math.user_message("Q").contains("\\boxed{...}"));
        let code = Profile::builtin("code").unwrap();
        assert!(code.user_message("Q").ends_with("\n\nTask: Q"));
        for name in ["web", "mhqa", "all-tools"] {
            let p = Profile::builtin(name).unwrap();
            assert!(p.user_message("Q").ends_with("\n\nQuestion: Q"), "{name}");
        }
    }

    #[test]
    fn stop_strings_are_tool_closers_then_answer() {
        let web = Profile::builtin("web").unwrap();
        assert_eq!(
            web.stop_strings(),
            vec!["</web_search>", "</crawl_page>", "</answer>"]
        );
        assert_eq!(web.max_tool_calls, 25);
        assert_eq!(Profile::builtin("mhqa").unwrap().max_tool_calls, 8);
    }

    #[test]
    fn bad_profiles_are_explained() {
        assert!(matches!(
            Profile::builtin("nope"),
            Err(ProfileError::Unknown(_))
        ));
        let no_placeholder = r#"
            name = "x"
            description = "d"
            tools = ["code"]
            answer = "short"
            max_tool_calls = 1
            user_template = "no question here"
        "#;
        let err = Profile::from_toml(no_placeholder, "test").unwrap_err();
        assert!(err.to_string().contains("{question}"), "{err}");
        let role_as_tool = no_placeholder
            .replace("[\"code\"]", "[\"think\"]")
            .replace("no question here", "{question}");
        let err = Profile::from_toml(&role_as_tool, "test").unwrap_err();
        assert!(err.to_string().contains("not a tool"), "{err}");
        let err = Profile::from_toml("name = 1", "test").unwrap_err();
        assert!(matches!(err, ProfileError::Syntax { .. }));
    }
}
