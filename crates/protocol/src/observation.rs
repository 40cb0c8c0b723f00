//! Reading observations back: what a `<code>` call's program printed (PROTOCOL.md §3).
//!
//! The runtime writes these texts (`catena-agent`'s `code_observation`); a vote and the
//! distillation read them back to see which values a chain's own programs printed.

/// The opening line of a program that exited with status 0 and printed something.
const PRINTED: &str = "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n";
const STDOUT_END: &str = "\n[STDOUT:END]";

/// What the program of a code observation printed, stripped, when it exited with status 0
/// and printed something; `None` for a failed run, a run with no output, or another tool's
/// observation. An observation cut to the length limit keeps its note of what was cut inside
/// the output.
pub fn printed_output(observation: &str) -> Option<&str> {
    let rest = observation.strip_prefix(PRINTED)?;
    let end = rest.rfind(STDOUT_END)?;
    Some(rest[..end].trim()).filter(|printed| !printed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_program_printed_is_read_back() {
        let ok = "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\nprimes: 1229\ndone\n[STDOUT:END]";
        assert_eq!(printed_output(ok), Some("primes: 1229\ndone"));
        // A failed run's output, a silent run, and other tools' observations print nothing.
        let failed = "[FAILED] Code exited with status 1.\n[STDOUT:BEGIN]\n7\n[STDOUT:END]";
        assert_eq!(printed_output(failed), None);
        assert_eq!(
            printed_output("[EXECUTED] Code exited with status 0 (no output)."),
            None
        );
        assert_eq!(
            printed_output("Found 10 results:\n\n## Web Results\n"),
            None
        );
        // The end marker missing (text cut by hand) is not a reading.
        assert_eq!(
            printed_output("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n12"),
            None
        );
    }
}
