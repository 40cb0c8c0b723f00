//! Untrusted bytes as a GGUF file: the header reader must return an error, never panic, loop or
//! allocate without bound.
#![no_main]

use catena_core::models::GgufHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = GgufHeader::parse(data, data.len() as u64) {
        let _ = header.check_data_present();
        let _ = header.architecture();
    }
});
