//! Untrusted bytes as a web page or an HTML document: reading it for `<crawl_page>` (metadata and
//! text with links) and for an index's passages (prose) must never panic, and must take time and
//! memory that grow with the page's length, not its nesting (libFuzzer's timeout and memory limit
//! fail the run otherwise).
#![no_main]

use catena_documents::{html_page, html_to_prose};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    std::hint::black_box(html_page(data));
    std::hint::black_box(html_to_prose(data));
});
