//! What this CPU has, read from the `cpuid` instruction and from the register state the operating
//! system enables (XCR0). `std::arch::is_x86_feature_detected!` cannot answer this check: for an
//! instruction set the code was compiled for, it answers yes without asking the CPU.

use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};

/// The `cpuid` registers the checked instruction sets are read from, and XCR0.
pub(super) struct Present {
    leaf1_ecx: u32,
    leaf7_ebx: u32,
    leaf7_ecx: u32,
    leaf7_sub1_eax: u32,
    xcr0: u64,
}

impl Present {
    pub fn read() -> Self {
        let max_leaf = __cpuid(0).eax;
        let leaf1_ecx = __cpuid(1).ecx;
        let (leaf7_ebx, leaf7_ecx, leaf7_sub1_eax) = if max_leaf >= 7 {
            let leaf7 = __cpuid_count(7, 0);
            // Leaf 7's EAX is the highest sub-leaf it has.
            let sub1 = if leaf7.eax >= 1 {
                __cpuid_count(7, 1).eax
            } else {
                0
            };
            (leaf7.ebx, leaf7.ecx, sub1)
        } else {
            (0, 0, 0)
        };
        let osxsave = leaf1_ecx & (1 << 27) != 0;
        Present {
            leaf1_ecx,
            leaf7_ebx,
            leaf7_ecx,
            leaf7_sub1_eax,
            xcr0: if osxsave { read_xcr0() } else { 0 },
        }
    }

    /// Whether the CPU has `name` (one of the names `build_cpu` checks; false for others) and, for
    /// the vector extensions, the operating system saves their registers.
    pub fn has(&self, name: &str) -> bool {
        let bit = |register: u32, n: u32| register & (1 << n) != 0;
        // XCR0 bits 1 and 2: SSE and AVX state; 5 to 7: AVX-512's mask and upper registers.
        let avx_state = self.xcr0 & 0b110 == 0b110;
        let avx512_state = avx_state && self.xcr0 & 0xe0 == 0xe0;
        match name {
            "sse4.2" => bit(self.leaf1_ecx, 20),
            "fma" => avx_state && bit(self.leaf1_ecx, 12),
            "avx" => avx_state && bit(self.leaf1_ecx, 28),
            "f16c" => avx_state && bit(self.leaf1_ecx, 29),
            "avx2" => avx_state && bit(self.leaf7_ebx, 5),
            "bmi2" => bit(self.leaf7_ebx, 8),
            "avxvnni" => avx_state && bit(self.leaf7_sub1_eax, 4),
            "avx512f" => avx512_state && bit(self.leaf7_ebx, 16),
            "avx512dq" => avx512_state && bit(self.leaf7_ebx, 17),
            "avx512cd" => avx512_state && bit(self.leaf7_ebx, 28),
            "avx512bw" => avx512_state && bit(self.leaf7_ebx, 30),
            "avx512vl" => avx512_state && bit(self.leaf7_ebx, 31),
            "avx512vbmi" => avx512_state && bit(self.leaf7_ecx, 1),
            "avx512vnni" => avx512_state && bit(self.leaf7_ecx, 11),
            "avx512bf16" => avx512_state && bit(self.leaf7_sub1_eax, 5),
            _ => false,
        }
    }
}

fn read_xcr0() -> u64 {
    // SAFETY: `xgetbv` exists where `cpuid` reports OSXSAVE, which the caller checked (leaf 1,
    // ECX bit 27), and register 0 (XCR0) can be read at every privilege level.
    unsafe { _xgetbv(0) }
}
