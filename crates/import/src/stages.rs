//! The stages after the checkpoint is on disk, shared by folder imports and hub pulls: convert to
//! GGUF F16, quantise with llama.cpp, install with a record.

use crate::{ImportError, ImportEvent, ImportSink, Stage, io_at};
use catena_convert::Checkpoint;
use catena_engine_api::QuantType;
use catena_gguf::inspect::Inspection;
use catena_hub::catalog;
use catena_hub::config::Paths;
use catena_hub::installed::{self, Made};
use catena_worker::{QuantizeJob, WorkerCommand, quantize_in_child};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Room kept free beyond the estimate, and the room a GGUF header takes.
pub(crate) const MARGIN: u64 = 64 << 20;
pub(crate) const HEADER_ALLOWANCE: u64 = 16 << 20;

/// The size of the quantised file made from an F16 file of `f16_bytes` (llama.cpp's bits per
/// weight, from the catalog); 0 for F16, which is installed as it is.
pub(crate) fn result_bytes(f16_bytes: u64, quant: QuantType) -> u64 {
    match quant {
        QuantType::F16 => 0,
        other => {
            let bits = catalog::bits_per_weight(other.name()).unwrap_or(16.0);
            (f16_bytes as f64 * bits / 16.0) as u64
        }
    }
}

/// Fails unless `dir` has `needed` bytes free.
pub(crate) fn check_space(
    dir: &Path,
    needed: u64,
    what: String,
    verb: &'static str,
) -> Result<(), ImportError> {
    let available = installed::free_space(dir)?;
    if available < needed {
        return Err(ImportError::DiskFull {
            what,
            verb,
            dir: dir.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(())
}

/// Removes `path` if it is there.
pub(crate) fn remove_if_exists(path: &Path) -> Result<(), ImportError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(path)(e)),
        _ => Ok(()),
    }
}

/// Writes the F16 file `f16` from `checkpoint`: into `f16.part`, renamed when complete, so a
/// file at `f16` is always whole.
pub(crate) fn convert(
    checkpoint: &mut Checkpoint,
    f16: &Path,
    name: &str,
    events: &ImportSink,
) -> Result<(), ImportError> {
    let part = f16.with_extension("gguf.part");
    let total = checkpoint.f16_data_bytes() + HEADER_ALLOWANCE;
    events(ImportEvent::Stage {
        stage: Stage::Convert,
        total: Some(total),
        done: 0,
        detail: format!(
            "converting {} weights ({}) to GGUF F16",
            checkpoint.architecture().gguf_name(),
            catena_gguf::inspect::human_bytes(checkpoint.source_bytes())
        ),
    });
    let written = checkpoint.write_f16(&part, name, &mut |p| {
        events(ImportEvent::Progress {
            stage: Stage::Convert,
            done: p.written_bytes,
            total: Some(p.total_bytes),
        })
    });
    if let Err(e) = written {
        remove_if_exists(&part)?;
        return Err(e.into());
    }
    std::fs::rename(&part, f16).map_err(io_at(f16))
}

/// What an import installs.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub made: Made,
    pub quant: QuantType,
    /// Quantiser threads (0: all cores).
    pub threads: usize,
    /// The child process llama.cpp's quantiser runs in.
    pub quantizer: WorkerCommand,
}

/// Quantises `f16` into the models folder (or takes it as it is for F16), checks the result as
/// llama.cpp's loader would, and installs it as `target.made.file`. `f16` is removed once the
/// result is installed (or moved, for F16), and also when the quantiser or the check fails: the
/// same file would fail the same way again, so it is not kept for a retry.
pub(crate) fn quantize_and_install(
    paths: &Paths,
    f16: &Path,
    target: &Target,
    events: &ImportSink,
) -> Result<PathBuf, ImportError> {
    let models = paths.models_dir();
    let made = if target.quant == QuantType::F16 {
        f16.to_path_buf()
    } else {
        let out = models.join(format!(".import-{}.part", target.made.file));
        remove_if_exists(&out)?;
        let f16_bytes = std::fs::metadata(f16).map_err(io_at(f16))?.len();
        let estimate = result_bytes(f16_bytes, target.quant);
        events(ImportEvent::Stage {
            stage: Stage::Quantize,
            total: Some(estimate),
            done: 0,
            detail: format!("quantising to {} with llama.cpp", target.quant.name()),
        });
        let job = QuantizeJob {
            input: f16.to_path_buf(),
            output: out.clone(),
            quant: target.quant,
            threads: target.threads,
        };
        let result = watch_growth(&out, estimate, events, || {
            quantize_in_child(&target.quantizer, &job)
        });
        if let Err(e) = result {
            remove_if_exists(&out)?;
            remove_if_exists(f16)?;
            return Err(ImportError::Quantize(e));
        }
        out
    };
    if let Some(reason) = why_it_would_not_load(&made) {
        remove_if_exists(&made)?;
        remove_if_exists(f16)?;
        return Err(ImportError::WouldNotLoad {
            file: target.made.file.clone(),
            reason,
        });
    }
    let installed = installed::install_made(paths, &made, &target.made)?;
    remove_if_exists(f16)?;
    events(ImportEvent::Done {
        path: installed.clone(),
        file: target.made.file.clone(),
    });
    Ok(installed)
}

/// Why llama.cpp would refuse the model file at `path`, or abort or panic while loading it; `None`
/// when it would load: catena-gguf's inspection (architecture, tensor types, data inside the
/// file, and the shape numbers the loader requires, asserts on or passes on as signed 32-bit
/// integers: `catena_gguf::hyperparameters`), and attention heads, which a converted model has.
pub(crate) fn why_it_would_not_load(path: &Path) -> Option<String> {
    let Inspection {
        mut problems,
        kind,
        shape,
        ..
    } = match catena_gguf::inspect::inspect_file(path) {
        Ok(report) => report,
        Err(e) => return Some(e.to_string()),
    };
    if kind != "model" {
        problems.push(format!("it is a `{kind}` file, not a model"));
    }
    for (name, value) in [
        ("attention head count", shape.heads),
        ("key-value head count", shape.heads_kv),
    ] {
        if value == Some(0) {
            problems.push(format!("a {name} of 0"));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Runs `work`, reporting the size of `file` as it grows: llama.cpp's quantiser reports nothing
/// while it works, but writes its output tensor by tensor.
fn watch_growth<T>(file: &Path, estimate: u64, events: &ImportSink, work: impl FnOnce() -> T) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        let file = file.to_path_buf();
        let events = events.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(meta) = std::fs::metadata(&file) {
                    events(ImportEvent::Progress {
                        stage: Stage::Quantize,
                        done: meta.len().min(estimate),
                        total: Some(estimate),
                    });
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let result = work();
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    result
}

/// A local checkpoint folder to import.
#[derive(Debug, Clone)]
pub struct FolderImport {
    pub dir: PathBuf,
    /// The installed model's name; the file is `NAME-QUANT.gguf`.
    pub name: String,
    pub quant: QuantType,
    /// The prompt profile runs of it use by default.
    pub profile: Option<String>,
    /// Quantiser threads (0: all cores).
    pub threads: usize,
}

/// `catena models import DIR`: checks the checkpoint, converts it to F16 in the models folder
/// (a hidden `.import-*` file), quantises it in a child started by `quantizer` and installs it. A
/// name already installed is refused; what a killed earlier import left is started over.
pub fn import_folder(
    paths: &Paths,
    request: &FolderImport,
    quantizer: &WorkerCommand,
    events: &ImportSink,
) -> Result<PathBuf, ImportError> {
    if !catena_protocol::names::is_plain_name(&request.name) {
        return Err(ImportError::BadName(request.name.clone()));
    }
    let mut checkpoint = catena_convert::open(&request.dir)?;
    let models = paths.models_dir();
    let file = format!("{}-{}.gguf", request.name, request.quant.name());
    if models.join(&file).exists() {
        return Err(ImportError::AlreadyInstalled(file));
    }
    let f16 = models.join(format!(".import-{}-F16.gguf", request.name));
    remove_if_exists(&f16)?;
    remove_if_exists(&f16.with_extension("gguf.part"))?;
    let f16_bytes = checkpoint.f16_data_bytes() + HEADER_ALLOWANCE;
    check_space(
        &models,
        f16_bytes + result_bytes(f16_bytes, request.quant) + MARGIN,
        format!(
            "importing (the F16 file, then the {} file)",
            request.quant.name()
        ),
        "written",
    )?;
    convert(&mut checkpoint, &f16, &request.name, events)?;
    let target = Target {
        made: Made {
            file,
            quant: request.quant.name().to_string(),
            catalog_id: None,
            profile: request.profile.clone(),
        },
        quant: request.quant,
        threads: request.threads,
        quantizer: quantizer.clone(),
    };
    let result = quantize_and_install(paths, &f16, &target, events);
    if result.is_err() {
        remove_if_exists(&f16)?;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantised_sizes_follow_the_bits_per_weight() {
        let f16 = 16 << 30;
        assert_eq!(result_bytes(f16, QuantType::F16), 0);
        assert_eq!(
            result_bytes(f16, QuantType::Q8_0),
            (8.5 * f64::from(1u32 << 30)) as u64
        );
        assert!(result_bytes(f16, QuantType::Q4KM) < result_bytes(f16, QuantType::Q5KM));
    }

    #[test]
    fn a_folder_without_a_checkpoint_is_refused_and_nothing_is_written() {
        let data = tempfile::tempdir().unwrap();
        let paths = Paths::at(data.path(), &data.path().join("cache"));
        let empty = tempfile::tempdir().unwrap();
        let request = FolderImport {
            dir: empty.path().to_path_buf(),
            name: "x".into(),
            quant: QuantType::Q4KM,
            profile: None,
            threads: 1,
        };
        let sink: ImportSink = Arc::new(|_| {});
        let quantizer = WorkerCommand {
            program: "/nonexistent".into(),
            args: Vec::new(),
        };
        let err = import_folder(&paths, &request, &quantizer, &sink).unwrap_err();
        assert!(matches!(err, ImportError::Convert(_)), "{err}");
        let bad_name = FolderImport {
            name: ".hidden".into(),
            ..request
        };
        assert!(matches!(
            import_folder(&paths, &bad_name, &quantizer, &sink),
            Err(ImportError::BadName(_))
        ));
        assert!(
            !paths.models_dir().exists() || paths.models_dir().read_dir().unwrap().count() == 0
        );
    }
}
