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
    /// A fresh folder with `/tmp` and a placeholder folder at each of `mount_points` (guest
    /// paths), so that listing `/` or `/usr/local` shows the folders mounted there.
    pub(crate) fn new<'a>(mount_points: impl Iterator<Item = &'a str>) -> std::io::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("catena-sandbox-")
            .tempdir()?;
        std::fs::create_dir_all(dir.path().join("tmp"))?;
        for point in mount_points {
            let relative = point.trim_start_matches('/');
            if !relative.is_empty() {
                std::fs::create_dir_all(dir.path().join(relative))?;
            }
        }
        Ok(Scratch { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the folder holds more than `limit` bytes (or absurdly many entries). Anything
    /// that stops the measurement (a folder that cannot be opened, too many open handles) counts
    /// as over the limit: the guest made the tree, so the guest pays for what cannot be measured.
    pub(crate) fn size_exceeds(&self, limit: u64) -> bool {
        !within(self.dir.path(), limit).unwrap_or(false)
    }
}

/// Sums the sizes under `root`, opening each folder through its parent's handle (`openat`)
/// and never by path: a guest can nest folders far past `PATH_MAX`, where path-based calls
/// fail and a walk by path would skip what it could not name. Links are counted, not followed.
/// A folder's handle stays open only while some of its subfolders wait to be read, so the
/// handles held are at most the depth of the walk's current branch.
#[cfg(unix)]
fn within(root: &Path, limit: u64) -> std::io::Result<bool> {
    use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, openat, statat};
    use std::ffi::CString;
    use std::os::fd::OwnedFd;
    use std::rc::Rc;

    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut folder = openat(CWD, root, flags, Mode::empty())?;
    let mut waiting: Vec<(Rc<OwnedFd>, CString)> = Vec::new();
    let (mut bytes, mut entries) = (0u64, 0u64);
    loop {
        let handle = Rc::new(folder);
        for entry in Dir::read_from(&*handle)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            entries += 1;
            let stat = statat(&*handle, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
                waiting.push((handle.clone(), name.to_owned()));
            } else {
                bytes = bytes.saturating_add(u64::try_from(stat.st_size).unwrap_or(u64::MAX));
            }
            if bytes > limit || entries > MAX_ENTRIES {
                return Ok(false);
            }
        }
        drop(handle);
        let Some((parent, name)) = waiting.pop() else {
            return Ok(true);
        };
        folder = openat(&*parent, name.as_c_str(), flags, Mode::empty())?;
    }
}

/// Elsewhere, by path (no `openat`); an error still counts as over the limit.
#[cfg(not(unix))]
fn within(root: &Path, limit: u64) -> std::io::Result<bool> {
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            entries += 1;
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                bytes = bytes.saturating_add(meta.len());
            }
            if bytes > limit || entries > MAX_ENTRIES {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_without_following_links() {
        let s = Scratch::new(std::iter::empty()).unwrap();
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

    /// Folders nested past PATH_MAX (made through handles, as a guest can) are measured too.
    #[cfg(unix)]
    #[test]
    fn measures_past_path_max() {
        use rustix::fs::{Mode, OFlags, ftruncate, mkdirat, openat};
        let s = Scratch::new(std::iter::empty()).unwrap();
        let name = "d".repeat(200);
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut folder = openat(rustix::fs::CWD, s.path(), dir_flags, Mode::empty()).unwrap();
        for _ in 0..30 {
            mkdirat(&folder, name.as_str(), Mode::RWXU).unwrap();
            folder = openat(&folder, name.as_str(), dir_flags, Mode::empty()).unwrap();
        }
        let file = openat(
            &folder,
            "big",
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        ftruncate(&file, 10_000).unwrap();
        assert!(
            s.size_exceeds(5_000),
            "a file 6000 bytes deep in the tree is counted"
        );
        assert!(!s.size_exceeds(20_000));
    }
}
