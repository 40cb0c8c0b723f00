//! The worker's frame channel: its standard input, and a private copy of its standard output.
//!
//! llama.cpp, ggml and drivers may print to standard output on their own. A stray line in the
//! middle of a frame would desynchronise the protocol, so the worker moves the real pipe to a new
//! descriptor for its frames and points descriptor 1 at standard error, where such prints belong.

use std::io::{self, Write};

/// Takes standard output for frames; anything else written to descriptor 1 afterwards goes to
/// standard error.
#[cfg(unix)]
pub fn take_stdout() -> io::Result<Box<dyn Write + Send>> {
    use std::fs::File;
    use std::os::fd::FromRawFd;
    // Nothing buffered may be left behind on the old descriptor.
    io::Write::flush(&mut io::stdout())?;
    // SAFETY: `dup` and `dup2` take plain descriptor numbers and touch no Rust-owned memory.
    // Descriptors 1 and 2 are open for the life of the process (the parent gave us pipes).
    let frames = unsafe { libc::dup(libc::STDOUT_FILENO) };
    if frames < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `frames` is a descriptor `dup` just created; nothing else owns it, so the `File`
    // becomes its only owner and closes it once.
    Ok(Box::new(unsafe { File::from_raw_fd(frames) }))
}

/// Elsewhere frames share standard output with any stray print (llama.cpp logs through its
/// callback, so in practice nothing else writes there).
#[cfg(not(unix))]
pub fn take_stdout() -> io::Result<Box<dyn Write + Send>> {
    Ok(Box::new(io::stdout()))
}
