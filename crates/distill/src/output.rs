//! Distilled trajectories as training data: the JSONL `catena train sft` reads, and the AFM
//! release's alpaca JSON (PROTOCOL.md §5). The prompt is the profile's, as a CoA run renders it,
//! so the student learns the trajectory after the prompt it will be given.

use crate::Distilled;
use catena_protocol::profile::{Profile, ProfileError};
use serde_json::{Value, json};

/// One line of the trainer's JSONL: system, user and the trajectory as the assistant turn.
pub fn sft_line(distilled: &Distilled) -> Result<Value, ProfileError> {
    let profile = Profile::builtin(&distilled.profile)?;
    Ok(json!({
        "id": distilled.task_id,
        "messages": [
            {"role": "system", "content": profile.system},
            {"role": "user", "content": profile.user_message(&distilled.question)},
            {"role": "assistant", "content": distilled.trajectory},
        ],
        "profile": profile.name,
    }))
}

/// One item of the alpaca array: the user message as the instruction, the trajectory as the
/// output.
pub fn alpaca_item(distilled: &Distilled) -> Result<Value, ProfileError> {
    let profile = Profile::builtin(&distilled.profile)?;
    Ok(json!({
        "instruction": profile.user_message(&distilled.question),
        "input": "",
        "output": distilled.trajectory,
    }))
}
