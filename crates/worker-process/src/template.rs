//! The template child's side (`catena_worker::render_in_child` is the parent's): caps its own
//! memory, compiles the template, renders, answers, returns (and the process exits).

use catena_chat_format::{FormatError, TemplateSource};
use catena_engine_api::PromptPart;
use catena_worker::protocol::{Reply, TemplateJob, write_reply};
use catena_worker::{RENDER_MEMORY, WorkerExit};
use std::io::Write;

pub(crate) fn run_job(job: &TemplateJob, mut output: impl Write) -> Result<(), WorkerExit> {
    let reply = match cap_memory().and_then(|()| render(job)) {
        Ok((parts, instructions)) => Reply::Rendered {
            parts,
            instructions,
        },
        Err(error) => Reply::TemplateFailed { error },
    };
    write_reply(&mut output, &reply)?;
    Ok(())
}

/// The template compiled, and the job's conversation rendered (nothing when it has none). Jobs
/// come from the server, whose templates write no BOS or EOS text of their own.
fn render(job: &TemplateJob) -> Result<(Vec<PromptPart>, Vec<PromptPart>), FormatError> {
    let template = TemplateSource::new(Some(&job.template)).compile("", "")?;
    let Some(conversation) = &job.render else {
        return Ok((Vec::new(), Vec::new()));
    };
    let parts = template.render(&conversation.turns, &conversation.tools)?;
    // Only what the prompt cache keeps: a template that cannot render the instructions alone
    // (one that refuses an empty user message, say) costs the cache, not the request.
    let instructions = template
        .render_instructions(&conversation.turns, &conversation.tools)
        .unwrap_or_default();
    Ok((parts, instructions))
}

/// Caps the process's data (its heap and private mappings: what an allocation takes) at what it
/// holds now plus [`RENDER_MEMORY`]: past it an allocation fails and the process aborts, which
/// the parent reports. Linux only (the figure comes from `/proc`); elsewhere the render's fuel
/// and the parent's deadline are the only bounds.
#[cfg(target_os = "linux")]
fn cap_memory() -> Result<(), FormatError> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let cannot = |why: String| {
        FormatError::Template(format!("its process could not cap its memory ({why})"))
    };
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| cannot(e.to_string()))?;
    let held = status
        .lines()
        .find_map(|line| line.strip_prefix("VmData:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .ok_or_else(|| cannot("/proc/self/status has no VmData".into()))?;
    let cap = held.saturating_mul(1024).saturating_add(RENDER_MEMORY);
    setrlimit(
        Resource::Data,
        Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        },
    )
    .map_err(|e| cannot(e.to_string()))
}

#[cfg(not(target_os = "linux"))]
fn cap_memory() -> Result<(), FormatError> {
    Ok(())
}
