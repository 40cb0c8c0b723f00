//! The guest's `/`: a fresh folder per call, removed afterwards.
//!
//! The guest can create anything inside it, symbolic links included, so the host never follows a
//! link here: the size check reads link metadata only, and removal (`remove_dir_all`) unlinks
//! links without following them.

use std::path::Path;

/// Most entries a guest may create before the call is stopped.
const MAX_ENTRIES: u64 = 50_000;

pub(crate) struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn new() -> std::io::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("catena-sandbox-")
            .tempdir()?;
        std::fs::create_dir_all(dir.path().join("tmp"))?;
        // Placeholder under the read-only standard-library mount, so `/usr/local` lists it.
        std::fs::create_dir_all(dir.path().join("usr/local/lib"))?;
        Ok(Scratch { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the folder holds more than `limit` bytes (or absurdly many entries).
    pub(crate) fn size_exceeds(&self, limit: u64) -> bool {
        let mut bytes = 0u64;
        let mut entries = 0u64;
        let mut stack = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(read) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in read.flatten() {
                entries += 1;
                let Ok(meta) = entry.path().symlink_metadata() else {
                    continue;
                };
                if meta.is_dir() {
                    stack.push(entry.path());
                } else {
                    bytes += meta.len();
                }
                if bytes > limit || entries > MAX_ENTRIES {
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_without_following_links() {
        let s = Scratch::new().unwrap();
        std::fs::write(s.path().join("a"), vec![0u8; 1000]).unwrap();
        assert!(!s.size_exceeds(2000));
        assert!(s.size_exceeds(500));
        // A link to a big host folder counts as a link, not as the folder.
        #[cfg(unix)]
        std::os::unix::fs::symlink("/usr", s.path().join("usr-link")).unwrap();
        assert!(!s.size_exceeds(2000));
        let path = s.path().to_path_buf();
        drop(s);
        assert!(!path.exists());
        assert!(Path::new("/usr").exists());
    }
}
