//! Whether this CPU can run this build. Catena is built for the CPU of the machine that builds it
//! (`.cargo/config.toml`: Rust's `target-cpu=native`, which llama-cpp-sys-2 turns into
//! llama.cpp's own native build), so a binary that moves to another machine may hold instructions
//! that machine's CPU lacks, and would stop with "illegal instruction" at the first matrix
//! product. The binaries check first and refuse with the names of what is missing
//! (docs/ARCHITECTURE.md, "Built for the CPU it runs on").

/// `Err` with the message to stop with where this CPU lacks an instruction set this build's code
/// was compiled to use.
pub fn check() -> Result<(), String> {
    let missing = missing_build_features();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(refusal(&missing))
    }
}

/// Stops the process with the refusal where this CPU cannot run this build. On Linux the binaries
/// have the loader call it before any static initialiser ([`crate::check_cpu_before_start`]):
/// llama.cpp's C++ initialisers are compiled for the building CPU too, and on an AVX-512 machine
/// one of them already uses AVX-512 registers, so a check in `main` would come too late.
pub extern "C" fn exit_unless_runnable() {
    if let Err(refusal) = check() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "error: {refusal}");
        std::process::exit(1);
    }
}

/// Registers [`build_cpu::exit_unless_runnable`](crate::build_cpu::exit_unless_runnable) in the
/// executable's `.preinit_array` on Linux, so the loader runs it before the static initialisers
/// and `main`. Invoke it once, at the top level of a binary crate.
#[macro_export]
macro_rules! check_cpu_before_start {
    () => {
        #[cfg(target_os = "linux")]
        #[allow(unsafe_code)]
        // SAFETY: the loader calls each `.preinit_array` entry once, on the main thread, before
        // any initialiser, with (argc, argv, envp); the function takes no arguments, which the
        // C calling conventions of Linux's targets allow, and uses only std's stderr and exit.
        #[used]
        #[unsafe(link_section = ".preinit_array")]
        static CHECK_CPU_BEFORE_START: extern "C" fn() = $crate::build_cpu::exit_unless_runnable;
    };
}

/// Instruction sets this build's code was compiled to use and this CPU lacks; empty where the
/// build can run here.
fn missing_build_features() -> Vec<&'static str> {
    lacking(&compiled_and_present())
}

/// The instruction sets this build was compiled to use (those of the list this module checks).
pub fn build_features() -> Vec<&'static str> {
    required(&compiled_and_present())
        .map(|(name, _)| name)
        .collect()
}

/// Whether this CPU has instruction set `name` (one of those this module checks), asked of the
/// CPU itself: unlike `is_x86_feature_detected!`, also for sets the build was compiled for.
pub fn cpu_has(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cpuid::Present::read().has(name)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}

/// The message a binary stops with, naming the instruction sets this CPU lacks.
fn refusal(missing: &[&str]) -> String {
    format!(
        "this build of Catena uses instruction sets this CPU lacks ({}): it was built on a \
         machine with another CPU. Build it on this machine (`./catena` does), or build one that \
         runs on any x86-64 CPU with AVX2 with RUSTFLAGS=\"-C target-cpu=x86-64-v3\".",
        missing.join(", ")
    )
}

/// What llama.cpp's kernels use where the Rust code was compiled for no particular CPU (plain
/// `x86_64`): llama-cpp-sys-2 then leaves llama.cpp at its own defaults, AVX2 with FMA and F16C.
const GGML_DEFAULT_FLOOR: [&str; 4] = ["avx", "avx2", "fma", "f16c"];

/// Calls macro `$then` with the names of the instruction sets checked, each a literal (as `cfg!`
/// needs).
#[cfg(target_arch = "x86_64")]
macro_rules! checked_sets {
    ($then:ident) => {
        $then!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "bmi2",
            "avxvnni",
            "avx512f",
            "avx512cd",
            "avx512bw",
            "avx512dq",
            "avx512vl",
            "avx512vnni",
            "avx512vbmi",
            "avx512bf16"
        )
    };
}

// Reads XCR0 with `xgetbv`, which is unsafe.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod cpuid;

/// (instruction set, compiled for it, this CPU has it) for each set the kernels care about.
#[cfg(target_arch = "x86_64")]
fn compiled_and_present() -> Vec<(&'static str, bool, bool)> {
    let present = cpuid::Present::read();
    // `cfg!` needs the name as a literal.
    macro_rules! sets {
        ($($name:tt),*) => {
            vec![$(($name, cfg!(target_feature = $name), present.has($name))),*]
        };
    }
    checked_sets!(sets)
}

/// Other architectures' builds are checked by their own toolchains' baselines only.
#[cfg(not(target_arch = "x86_64"))]
fn compiled_and_present() -> Vec<(&'static str, bool, bool)> {
    Vec::new()
}

/// The sets the build needs, with whether this CPU has each.
fn required<'a>(
    sets: &'a [(&'static str, bool, bool)],
) -> impl Iterator<Item = (&'static str, bool)> + 'a {
    let generic = cfg!(target_arch = "x86_64")
        && !sets
            .iter()
            .any(|&(name, compiled, _)| name == "avx" && compiled);
    sets.iter()
        .filter(move |&&(name, compiled, _)| {
            compiled || (generic && GGML_DEFAULT_FLOOR.contains(&name))
        })
        .map(|&(name, _, present)| (name, present))
}

fn lacking(sets: &[(&'static str, bool, bool)]) -> Vec<&'static str> {
    required(sets)
        .filter(|&(_, present)| !present)
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_runs_on_the_machine_that_built_it() {
        // The test binary is built by the same configuration on this machine, so nothing it was
        // compiled for may be missing here.
        assert_eq!(missing_build_features(), Vec::<&str>::new());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn cpuid_agrees_with_the_standard_library_where_it_asks_the_cpu() {
        // The standard library asks the CPU only about sets the code was not compiled for (for
        // the others it answers yes unasked, which is why this module reads `cpuid` itself).
        let present = cpuid::Present::read();
        macro_rules! agree {
            ($($name:tt),*) => {$(
                if !cfg!(target_feature = $name) {
                    assert_eq!(present.has($name), std::arch::is_x86_feature_detected!($name), $name);
                }
            )*};
        }
        checked_sets!(agree);
    }

    #[test]
    fn a_set_compiled_for_and_absent_is_missing() {
        let sets = [
            ("avx", true, true),
            ("avx2", true, true),
            ("avx512f", true, false),
            ("avx512vnni", false, false),
        ];
        assert_eq!(lacking(&sets), vec!["avx512f"]);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_generic_build_still_needs_what_llama_cpp_uses_by_default() {
        // Rust compiled for plain x86_64 (no AVX): llama.cpp's kernels still use AVX2.
        let sets = [
            ("sse4.2", false, true),
            ("avx", false, true),
            ("avx2", false, false),
            ("fma", false, true),
            ("avx512f", false, false),
        ];
        assert_eq!(lacking(&sets), vec!["avx2"]);
    }

    #[test]
    fn the_refusal_names_what_is_missing_and_how_to_build() {
        let message = refusal(&["avx512f", "avx512vnni"]);
        assert!(message.contains("(avx512f, avx512vnni)"), "{message}");
        assert!(message.contains("target-cpu=x86-64-v3"), "{message}");
    }
}
