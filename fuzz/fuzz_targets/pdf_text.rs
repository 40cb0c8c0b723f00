//! Untrusted bytes as a PDF: reading its text must return text or an error. pdf-extract is known
//! to panic on some malformed files, which `pdf_text` catches and turns into the file's error (the
//! product's behaviour, so the panic hook libFuzzer installs is replaced with a silent one); what
//! fails here is what cannot be caught: an abort, a stack overflow, memory past libFuzzer's limit
//! (a decompression bomb the caps missed) or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Once;

static SILENT_PANICS: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    SILENT_PANICS.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let _ = catena_documents::pdf_text(data);
});
