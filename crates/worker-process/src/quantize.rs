//! The quantiser child's side (`catena_worker::quantize_in_child` is the parent's).

use catena_worker::WorkerExit;
use catena_worker::protocol::{QuantizeJob, Reply, write_reply};
use std::io::{self, Read, Write};

/// The child's side: quantises, answers, returns (and the process exits). When the input ends
/// first, the parent is gone (a stopped server): the process exits at once rather than
/// quantising for nobody, and the parent's next import removes the half-written output.
pub(crate) fn run_job(
    job: &QuantizeJob,
    mut input: impl Read + Send + 'static,
    mut output: impl Write,
) -> Result<(), WorkerExit> {
    let watcher = std::thread::Builder::new()
        .name("catena-quantize-input".into())
        .spawn(move || {
            let _ = io::copy(&mut input, &mut io::sink());
            std::process::exit(1);
        });
    if let Err(e) = watcher {
        tracing::warn!(error = %e, "cannot watch the quantiser's input; quantising anyway");
    }
    let reply =
        match catena_engine::llama::quantize(&job.input, &job.output, job.quant, job.threads) {
            Ok(()) => Reply::Quantized,
            Err(e) => Reply::Error { error: (&e).into() },
        };
    write_reply(&mut output, &reply)?;
    Ok(())
}
