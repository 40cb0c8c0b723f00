//! Quantising a GGUF file with llama.cpp's own quantiser (`llama_model_quantize` from the vendored
//! llama.cpp, through the sys crate), so that Q4_K_M here means exactly what `llama-quantize`
//! makes from the same file: the same per-tensor type choices, the same kernels.

use super::backend;
use crate::EngineError;
use catena_engine_api::QuantType;
use std::ffi::CString;
use std::path::Path;

/// llama.cpp's file type for `quant`.
fn ftype(quant: QuantType) -> llama_cpp_sys_2::llama_ftype {
    match quant {
        QuantType::F16 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_F16,
        QuantType::Q8_0 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q8_0,
        QuantType::Q5KM => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q5_K_M,
        QuantType::Q4KM => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q4_K_M,
    }
}

fn c_path(path: &Path) -> Result<CString, EngineError> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().into_owned().into_bytes();
    CString::new(bytes)
        .map_err(|_| EngineError::Backend(format!("{} contains a NUL byte", path.display())))
}

/// Writes `output`, the model of `input` (a GGUF file) quantised to `quant`, with llama.cpp's
/// default settings (no importance matrix) on `threads` threads (0: all cores). Blocks until
/// done: minutes for a 7B model. What llama.cpp logs about a failure is the error's reason.
///
/// llama.cpp aborts the whole process on some inputs instead of failing (a block count above its
/// 512 layers trips an assertion while the header is read), so a process that must outlive a bad
/// file calls this in a child: `catena_worker::quantize_in_child`.
pub fn quantize(
    input: &Path,
    output: &Path,
    quant: QuantType,
    threads: usize,
) -> Result<(), EngineError> {
    let input_c = c_path(input)?;
    let output_c = c_path(output)?;
    backend()?;
    let capture = super::log::install();
    let mark = capture.mark();
    // SAFETY: returns a plain struct by value; no pointers are taken.
    let mut params = unsafe { llama_cpp_sys_2::llama_model_quantize_default_params() };
    params.ftype = ftype(quant);
    params.nthread = i32::try_from(threads).unwrap_or(0);
    // SAFETY: both paths are NUL-terminated strings that outlive the call, and `params` is the
    // library's own default with two plain fields changed (its pointers stay null).
    let status = unsafe {
        llama_cpp_sys_2::llama_model_quantize(input_c.as_ptr(), output_c.as_ptr(), &params)
    };
    if status == 0 {
        return Ok(());
    }
    let said = capture.problems_since(mark);
    Err(EngineError::BadModel {
        path: input.to_path_buf(),
        reason: if said.is_empty() {
            format!("llama.cpp's quantiser failed (status {status})")
        } else {
            said.join("; ")
        },
    })
}
