//! The id llama.cpp gives a backend device (its PCI bus address, where the backend knows it),
//! read through the sys crate. One GPU reached by two backends (CUDA and Vulkan in a `cuda` build
//! on Linux) is listed twice; llama.cpp loads onto the first and skips the other, and the planner
//! must count its memory once.

use std::ffi::CStr;

/// The id of llama.cpp's backend device `index`; `None` when there is no such device or its
/// backend gives none.
pub fn device_id(index: usize) -> Option<String> {
    // SAFETY: the backends are initialised (the caller holds the `LlamaBackend`); `index` is
    // checked against the device count before `ggml_backend_dev_get`, whose device lives as long
    // as the process. `ggml_backend_dev_get_props` fills every field of the zeroed struct (a
    // valid value: pointers, an integer and booleans); `device_id` is null or a NUL-terminated
    // string owned by the device, copied before this returns.
    unsafe {
        if index >= llama_cpp_sys_2::ggml_backend_dev_count() {
            return None;
        }
        let device = llama_cpp_sys_2::ggml_backend_dev_get(index);
        if device.is_null() {
            return None;
        }
        let mut props: llama_cpp_sys_2::ggml_backend_dev_props = std::mem::zeroed();
        llama_cpp_sys_2::ggml_backend_dev_get_props(device, &mut props);
        if props.device_id.is_null() {
            return None;
        }
        Some(
            CStr::from_ptr(props.device_id)
                .to_string_lossy()
                .into_owned(),
        )
    }
}
