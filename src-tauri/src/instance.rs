//! One app per user: a second `catena-desktop` would start a second model worker and compete for
//! the same memory, so it stops and says where the first one is. The lock is an advisory file
//! lock, released by the kernel when the process ends, even when it is killed.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Held for the app's life.
pub struct InstanceLock {
    _file: File,
}

pub fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join("desktop.lock")
}

/// Takes the lock; `None` when another instance holds it.
pub fn acquire(data_dir: &Path) -> std::io::Result<Option<InstanceLock>> {
    std::fs::create_dir_all(data_dir)?;
    let path = lock_path(data_dir);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => {
            // The pid is for people reading the file; the lock is what counts.
            file.set_len(0)?;
            writeln!(file, "{}", std::process::id())?;
            Ok(Some(InstanceLock { _file: file }))
        }
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("catena-instance-{}", std::process::id()));
        let first = acquire(&dir).unwrap();
        assert!(first.is_some());
        // A second open file description of the same file conflicts, as another process would.
        assert!(acquire(&dir).unwrap().is_none());
        drop(first);
        assert!(acquire(&dir).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
