//! The LoRA adapter Catena ships for its default model. The model's weights stay as published;
//! the adapter, trained with Catena's own recipe (multi-agent distillation with the model as its
//! own teacher, SFT on what the filters kept, then agentic RL: docs/TRAINING.md), trains it
//! toward the Chain-of-Agents protocol. It travels inside the binary, so a fresh machine has it
//! with nothing to train or fetch; llama.cpp reads adapters from a path, so on first use it is
//! written into the cache folder, checked, and read from there.

use super::catalog::{AssetFile, DEFAULT_MODEL};
use super::fetch::{AssetError, marker_path};
use crate::config::Paths;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// An adapter carried in the binary for one pinned model file.
#[derive(Debug, Clone, Copy)]
pub struct ShippedAdapter {
    /// What runs, reports and the session store call it.
    pub name: &'static str,
    /// The file name in the cache folder.
    pub file: &'static str,
    pub sha256: &'static str,
    /// The model file it was trained on (its pinned digest identifies the weights).
    pub model: &'static AssetFile,
    bytes: &'static [u8],
}

/// The adapter of the default model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M): LoRA rank 8 on all
/// seven projections, F16, from `scripts/training/distill-run.sh` (SFT, then 6 RL steps). How it
/// was made and what it measured: docs/TRAINING.md.
pub const DEFAULT_MODEL_ADAPTER: ShippedAdapter = ShippedAdapter {
    name: "catena-coa-0.5b",
    file: "catena-coa-0.5b.gguf",
    sha256: "23509b58e626216dbc52a2a23411912dc65134e4cdd2a82d215799dd10743d5d",
    model: &DEFAULT_MODEL.files[0],
    bytes: include_bytes!("../../../../models/adapters/catena-coa-0.5b.gguf"),
};

impl ShippedAdapter {
    /// Where the adapter is written for llama.cpp to read.
    pub fn path(&self, paths: &Paths) -> PathBuf {
        paths.cache_dir.join("adapters").join(self.file)
    }

    /// The adapter's file, written (and checked against its digest) on first use.
    pub fn ensure(&self, paths: &Paths) -> Result<PathBuf, AssetError> {
        let path = self.path(paths);
        let size = self.bytes.len() as u64;
        let size_ok = std::fs::metadata(&path).is_ok_and(|m| m.len() == size);
        let marker_ok = std::fs::read_to_string(marker_path(&path))
            .is_ok_and(|m| m.split_whitespace().next() == Some(self.sha256));
        if size_ok && marker_ok {
            return Ok(path);
        }
        let actual = hex::encode(Sha256::digest(self.bytes));
        if actual != self.sha256 {
            return Err(AssetError::Checksum {
                file: self.file,
                expected: self.sha256,
                actual,
                size,
                expected_size: size,
            });
        }
        let io = |source| AssetError::Io {
            path: path.clone(),
            source,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        // Written whole under a temporary name and renamed, so a reader never sees half a file.
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        tmp.write_all(self.bytes).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        std::fs::write(marker_path(&path), format!("{} {size}\n", self.sha256)).map_err(io)?;
        Ok(path)
    }
}

/// The adapter Catena ships for the model at `model`: the default model as Catena installs it
/// gets [`DEFAULT_MODEL_ADAPTER`]; any other file (a model the user chose, the same weights
/// elsewhere) gets none.
pub fn adapter_for_model(model: &Path, paths: &Paths) -> Option<&'static ShippedAdapter> {
    let adapter = &DEFAULT_MODEL_ADAPTER;
    let installed = super::installed_path(&DEFAULT_MODEL, adapter.model, paths);
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    same(model, &installed).then_some(adapter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_digest_is_the_embedded_files() {
        let adapter = DEFAULT_MODEL_ADAPTER;
        assert_eq!(hex::encode(Sha256::digest(adapter.bytes)), adapter.sha256);
        // A GGUF file, as llama.cpp's adapter loader expects.
        assert_eq!(&adapter.bytes[..4], b"GGUF");
    }

    #[test]
    fn only_the_installed_default_model_gets_the_adapter_and_it_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::at(&dir.path().join("data"), &dir.path().join("cache"));
        let model = super::super::installed_path(&DEFAULT_MODEL, &DEFAULT_MODEL.files[0], &paths);
        assert!(adapter_for_model(&model, &paths).is_some());
        assert!(adapter_for_model(&dir.path().join("other.gguf"), &paths).is_none());

        let adapter = adapter_for_model(&model, &paths).unwrap();
        let path = adapter.ensure(&paths).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), adapter.bytes);
        // A damaged copy (another size) is written again.
        std::fs::write(&path, b"GGUF").unwrap();
        assert_eq!(adapter.ensure(&paths).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap().len(), adapter.bytes.len());
        // So is an earlier release's adapter of the same size: its marker names another digest.
        std::fs::write(&path, vec![0u8; adapter.bytes.len()]).unwrap();
        std::fs::write(
            marker_path(&path),
            format!("{} {}\n", "0".repeat(64), adapter.bytes.len()),
        )
        .unwrap();
        adapter.ensure(&paths).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), adapter.bytes);
    }
}
