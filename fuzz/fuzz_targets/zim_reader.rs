//! Untrusted bytes as a ZIM archive: opening it, listing its entries and reading every blob must
//! return errors, never panic, loop or allocate without bound (clusters and the archive's total
//! are capped; entries sharing a blob are read once).
#![no_main]

use catena_zim::{ZimArchive, read_entries};
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(mut archive) =
        ZimArchive::from_reader(Path::new("fuzz.zim"), Cursor::new(data), data.len() as u64)
    else {
        return;
    };
    let Ok(entries) = archive.entries(|_| true) else {
        return;
    };
    let mut read = 0usize;
    let _ = read_entries(&mut archive, &entries, |entry, bytes| {
        read += entry.path.len() + bytes.map_or(0, <[u8]>::len);
    });
    assert!(read < usize::MAX);
});
