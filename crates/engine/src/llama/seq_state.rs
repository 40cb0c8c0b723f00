//! One sequence's KV cells as bytes and back, through llama.cpp's own serialisation.
//!
//! `llama-cpp-2` offers this safely only as an opaque snapshot that cannot leave the process
//! (`SeqState`); the prompt cache needs the bytes on disk, so the two raw calls live here.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::LlamaStateSeqFlags;

/// The KV cells of sequence `seq` (positions and values), as llama.cpp writes them; `None` when
/// llama.cpp wrote another length than it announced.
pub(super) fn save(ctx: &LlamaContext<'_>, seq: i32) -> Option<Vec<u8>> {
    let flags = LlamaStateSeqFlags::empty();
    let size = ctx.state_seq_get_size_ext(seq, flags);
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds exactly the size llama.cpp just reported for this sequence and
    // flags; nothing changes the context in between (we hold it borrowed), so the write it makes
    // is that size and stays inside the buffer.
    let written = unsafe { ctx.state_seq_get_data_ext(bytes.as_mut_ptr(), seq, flags) };
    (written == size).then_some(bytes)
}

/// Puts `bytes` (from [`save`], for a context of the same model and cache type) into sequence
/// `seq`, which must be empty. False when llama.cpp refused them (it then leaves the sequence
/// empty).
pub(super) fn restore(ctx: &mut LlamaContext<'_>, seq: i32, bytes: &[u8]) -> bool {
    // SAFETY: llama.cpp reads through a reader bounded by `bytes.len()` and catches its own
    // errors (a short or mismatched buffer returns 0 and clears the sequence); the caller passes
    // only bytes `save` produced, checked against a digest taken when they were written.
    unsafe { ctx.state_seq_set_data_ext(bytes, seq, LlamaStateSeqFlags::empty()) }
}
