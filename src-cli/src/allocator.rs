//! The process's allocator, and the one setting training changes on it.
//!
//! mimalloc instead of the system allocator: training allocates and frees tensors of tens of
//! megabytes thousands of times a step, and glibc's malloc hands those back to the kernel and
//! faults them in again (measured: a fifth of the trainer's time in page faults and TLB
//! flushes); mimalloc keeps them for reuse.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`, by its position in the option enum of the mimalloc
/// sources that `libmimalloc-sys` vendors (the same position in their v2 and v3; the crate names
/// its neighbours, 14 and 16, but not this one). The test below reads its documented default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never hand freed memory back to the kernel, for the rest of the process.
///
/// mimalloc (v3, which `libmimalloc-sys` builds unless asked for v2) gives pages it has not
/// reused for a second back (`MADV_DONTNEED`), and the next tensor of that size faults them in
/// again, zeroed: 14,000 such calls and 9.9 GiB in a two-step `catena train sft` of the default
/// model, and 7% of its time in the kernel zeroing pages. A training step frees and allocates the
/// same sizes over and over, so keeping them trains about a tenth faster for a few hundred MB
/// more peak memory (docs/BENCHMARKS.md, "Training"). Only the training commands ask for it: a
/// server should give memory back.
pub fn keep_freed_memory() {
    // SAFETY: `mi_option_set` takes two integers and stores the value in mimalloc's option
    // table; it reads no pointer and may be called at any time, from any thread.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The position names the option it is meant to: its documented default in mimalloc v3 is
    /// 1,000 ms, and no other option of v3 defaults to 1,000 (its neighbours: 1 and 0).
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: `mi_option_get` reads mimalloc's option table; no pointer is involved.
        let default = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(
            default, 1000,
            "mimalloc's purge delay should default to 1,000 ms"
        );
        keep_freed_memory();
        // SAFETY: as above.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, -1);
    }
}
