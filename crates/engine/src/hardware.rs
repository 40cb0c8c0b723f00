//! What this machine has for a model: the CPU (and the instruction sets llama.cpp's kernels use),
//! memory available now, and the devices this build's llama.cpp backends can use, with their free
//! memory. `catena doctor` prints it; the planner sizes a model to it.

use crate::EngineError;
use crate::llama::{BackendDevice, backend_devices, gpu_backends_built, supports_gpu_offload};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Cpu {
    pub model: String,
    pub physical_cores: usize,
    pub logical_cores: usize,
    /// Instruction sets present that speed up llama.cpp's CPU kernels.
    pub features: Vec<&'static str>,
    /// Instruction sets llama.cpp's CPU kernels want and this CPU lacks.
    pub missing: Vec<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hardware {
    pub os: String,
    pub cpu: Cpu,
    pub ram_total: u64,
    pub ram_available: u64,
    /// The GPU backends compiled into this build (`cuda`, `metal`, `vulkan`).
    pub gpu_backends_built: Vec<&'static str>,
    /// Whether this build can offload layers.
    pub gpu_offload: bool,
    /// Every device llama.cpp reports (the CPU included).
    pub devices: Vec<BackendDevice>,
    /// GPUs the operating system shows when llama.cpp found none it can use (an NVIDIA card in a
    /// CPU-only build, an AMD card without its Vulkan driver), so the doctor can say how to use
    /// them.
    pub unused_gpus: Vec<String>,
}

impl Hardware {
    /// Free memory of the GPUs llama.cpp can offload to, summed; `None` when there are none.
    pub fn gpu_free(&self) -> Option<u64> {
        if !self.gpu_offload {
            return None;
        }
        let gpus: Vec<&BackendDevice> = self
            .devices
            .iter()
            .filter(|d| d.gpu && d.same_gpu_as.is_none())
            .collect();
        (!gpus.is_empty()).then(|| gpus.iter().map(|d| d.memory_free).sum())
    }
}

/// Looks at the machine (a fraction of a second; initialises llama.cpp's backends).
pub fn probe() -> Result<Hardware, EngineError> {
    use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
    let system = System::new_with_specifics(
        RefreshKind::nothing()
            .with_memory(MemoryRefreshKind::nothing().with_ram())
            .with_cpu(CpuRefreshKind::nothing()),
    )
    .map_err(|e| EngineError::Backend(format!("cannot read the system's memory and CPU: {e}")))?;
    let model = system
        .cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let (features, missing) = cpu_features();
    let devices = backend_devices()?;
    let gpu_offload = supports_gpu_offload()?;
    let mut hardware = Hardware {
        os: System::long_os_version().unwrap_or_else(|_| std::env::consts::OS.to_string()),
        cpu: Cpu {
            model,
            physical_cores: System::physical_core_count().unwrap_or(1),
            logical_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            features,
            missing,
        },
        ram_total: system.total_memory(),
        ram_available: system.available_memory(),
        gpu_backends_built: gpu_backends_built(),
        gpu_offload,
        devices,
        unused_gpus: Vec::new(),
    };
    // The kernel's GPUs matter only where llama.cpp found none to use.
    if hardware.gpu_free().is_none() {
        hardware.unused_gpus = os_gpus();
    }
    Ok(hardware)
}

/// (present, missing) among the instruction sets llama.cpp's CPU kernels use.
fn cpu_features() -> (Vec<&'static str>, Vec<&'static str>) {
    let mut present = Vec::new();
    let mut missing = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let checks: [(&str, bool, bool); 7] = [
            (
                "sse4.2",
                catena_engine_api::build_cpu::cpu_has("sse4.2"),
                true,
            ),
            ("avx", catena_engine_api::build_cpu::cpu_has("avx"), true),
            ("avx2", catena_engine_api::build_cpu::cpu_has("avx2"), true),
            ("fma", catena_engine_api::build_cpu::cpu_has("fma"), true),
            ("f16c", catena_engine_api::build_cpu::cpu_has("f16c"), true),
            (
                "avx512f",
                catena_engine_api::build_cpu::cpu_has("avx512f"),
                false,
            ),
            (
                "avx512vnni",
                catena_engine_api::build_cpu::cpu_has("avx512vnni"),
                false,
            ),
        ];
        for (name, has, wanted) in checks {
            if has {
                present.push(name);
            } else if wanted {
                missing.push(name);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let checks: [(&str, bool, bool); 4] = [
            (
                "neon",
                std::arch::is_aarch64_feature_detected!("neon"),
                true,
            ),
            (
                "dotprod",
                std::arch::is_aarch64_feature_detected!("dotprod"),
                true,
            ),
            (
                "fp16",
                std::arch::is_aarch64_feature_detected!("fp16"),
                false,
            ),
            ("sve", std::arch::is_aarch64_feature_detected!("sve"), false),
        ];
        for (name, has, wanted) in checks {
            if has {
                present.push(name);
            } else if wanted {
                missing.push(name);
            }
        }
    }
    (present, missing)
}

/// GPUs the Linux kernel shows: NVIDIA's by model name from its driver, AMD's and Intel's from
/// the display devices' PCI vendor (empty elsewhere; a virtual machine's display is none of them).
fn os_gpus() -> Vec<String> {
    let mut gpus: Vec<String> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| {
            std::fs::read_to_string(e.path().join("information"))
                .ok()
                .and_then(|info| {
                    info.lines()
                        .find_map(|l| l.strip_prefix("Model:"))
                        .map(|m| m.trim().to_string())
                })
                .unwrap_or_else(|| "an NVIDIA GPU".to_string())
        })
        .collect();
    let mut cards: Vec<_> = std::fs::read_dir("/sys/class/drm")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // card0, card1: the devices (card0-HDMI-A-1 and the like are their outputs).
        .filter(|name| {
            name.strip_prefix("card")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    cards.sort();
    for card in cards {
        let vendor = std::fs::read_to_string(format!("/sys/class/drm/{card}/device/vendor"));
        let name = match vendor.as_deref().map(str::trim) {
            Ok("0x1002") => "an AMD GPU",
            Ok("0x8086") => "an Intel GPU",
            _ => continue,
        };
        gpus.push(format!("{name} ({card})"));
    }
    gpus
}

/// The plan for running the model at `path` on this machine (see [`catena_engine_api::plan`]).
pub fn plan_for_model(
    path: &std::path::Path,
    overrides: catena_engine_api::plan::Overrides,
) -> Result<catena_engine_api::plan::Plan, EngineError> {
    use catena_engine_api::plan::{Capacity, ModelSize, plan};
    let bad = |reason: String| EngineError::BadModel {
        path: path.to_path_buf(),
        reason,
    };
    let report = catena_gguf::inspect::inspect_file(path).map_err(|e| bad(e.to_string()))?;
    let size = ModelSize::from_inspection(&report)
        .ok_or_else(|| bad("its header lacks the layer count or attention shape".into()))?;
    let machine = probe()?;
    Ok(plan(
        &size,
        Capacity {
            ram_available: machine.ram_available,
            gpu_free: machine.gpu_free(),
        },
        overrides,
    ))
}
