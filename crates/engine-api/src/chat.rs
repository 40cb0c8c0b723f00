//! Chat messages and the ChatML framing.

use crate::PromptPart;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// The ChatML framing the AFM checkpoints were trained with, up to the opening of the assistant
/// turn; only the markers are special tokens, so message text can never forge one.
pub fn chatml_prompt(messages: &[ChatMessage]) -> Vec<PromptPart> {
    let mut parts = Vec::with_capacity(messages.len() * 4 + 2);
    for m in messages {
        parts.push(PromptPart::special("<|im_start|>"));
        parts.push(PromptPart::plain(format!("{}\n{}", m.role, m.content)));
        parts.push(PromptPart::special("<|im_end|>"));
        parts.push(PromptPart::plain("\n"));
    }
    parts.push(PromptPart::special("<|im_start|>"));
    parts.push(PromptPart::plain("assistant\n"));
    parts
}
