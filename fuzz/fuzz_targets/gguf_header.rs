//! Untrusted bytes as a GGUF file: the header reader and the inspection built on it must return an
//! error or a report, never panic, loop or allocate without bound.
#![no_main]

use catena_gguf::GgufHeader;
use catena_gguf::inspect::inspect;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = GgufHeader::parse(data, data.len() as u64) {
        let _ = header.check_data_present();
        let report = inspect(Path::new("fuzz.gguf"), &header);
        let _ = report.to_string();
    }
});
