//! The KV cells of prompt prefixes many runs share (a profile's system message), kept on disk
//! between processes, so a run evaluates only its own part of the prompt (docs/ARCHITECTURE.md,
//! "The prompt cache").
//!
//! An entry is valid only for what computed it: the model file, the adapter and its scale, the
//! offloaded layers, the `catena` binary (its llama.cpp kernels), the threads, the batch size and
//! the cache type all change the numbers in the last bits, so all of them are in the entry's key.
//! The bytes handed back to llama.cpp are exactly the bytes it wrote, checked by a digest taken
//! when they were written; anything else (a half-written file, another version's entry, a flipped
//! bit) is a miss, removed, and the prefix is evaluated again. Nothing here can fail a run.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Prefixes shorter than this are evaluated each time: a file is not worth it.
pub(super) const MIN_PREFIX_TOKENS: usize = 64;
/// The folder is kept under this many bytes, oldest entries (by last use) removed first.
const MAX_CACHE_BYTES: u64 = 1 << 30;
const MAGIC: &[u8; 8] = b"CATENAKV";
const VERSION: u32 = 1;
/// Magic, version, key, token count, blob length, blob digest.
const HEADER_BYTES: usize = 8 + 4 + 32 + 4 + 8 + 32;
const SUFFIX: &str = "kv";

/// One folder of entries, for one loaded model.
#[derive(Debug, Clone)]
pub(super) struct PromptCache {
    dir: PathBuf,
    /// Digest of everything fixed at load time that the numbers depend on.
    identity: [u8; 32],
}

/// What an entry is for: the engine's identity, the session's settings and the prefix's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key([u8; 32]);

/// What decides the numbers of a session, beyond its engine.
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionSettings {
    pub threads: i32,
    pub batch_size: usize,
    pub kv_cache: crate::KvCacheType,
}

/// The files an engine's numbers depend on, as loaded.
pub(super) struct Loaded<'a> {
    pub model: &'a Path,
    pub adapter: Option<(&'a Path, f32)>,
    pub gpu_layers: u32,
}

impl PromptCache {
    /// The cache in `dir` for an engine loaded from `loaded`; `None` (and no cache) when a file it
    /// depends on cannot be read for its size and time.
    pub(super) fn open(dir: &Path, loaded: &Loaded<'_>) -> Option<PromptCache> {
        let mut hash = Sha256::new();
        hash.update(b"catena prompt cache\0");
        hash.update(VERSION.to_le_bytes());
        let exe = std::env::current_exe().ok()?;
        file_identity(&mut hash, &exe)?;
        file_identity(&mut hash, loaded.model)?;
        match loaded.adapter {
            Some((path, scale)) => {
                hash.update(b"adapter\0");
                file_identity(&mut hash, path)?;
                hash.update(scale.to_bits().to_le_bytes());
            }
            None => hash.update(b"no adapter\0"),
        }
        hash.update(loaded.gpu_layers.to_le_bytes());
        Some(PromptCache {
            dir: dir.to_path_buf(),
            identity: hash.finalize().into(),
        })
    }

    pub(super) fn key(&self, settings: SessionSettings, tokens: &[i32]) -> Key {
        let mut hash = Sha256::new();
        hash.update(self.identity);
        hash.update(settings.threads.to_le_bytes());
        hash.update((settings.batch_size as u64).to_le_bytes());
        hash.update(format!("{:?}", settings.kv_cache).as_bytes());
        hash.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            hash.update(t.to_le_bytes());
        }
        Key(hash.finalize().into())
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}.{SUFFIX}", hex::encode(key.0)))
    }

    /// The state stored for `key`, if there is a sound one; an entry that is not is removed.
    pub(super) fn load(&self, key: &Key, tokens: &[i32]) -> Option<Vec<u8>> {
        let path = self.path(key);
        let bytes = read_capped(&path, MAX_CACHE_BYTES)?;
        match decode(&bytes, key, tokens) {
            Ok(state) => {
                // Last use, for eviction.
                if let Ok(file) = std::fs::File::options().write(true).open(&path) {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                Some(state.to_vec())
            }
            Err(why) => {
                tracing::warn!(entry = %path.display(), why, "prompt cache entry dropped");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `state` for `key` (written under a temporary name, then renamed, so a reader
    /// never sees half of it), then trims the folder to its budget.
    pub(super) fn store(&self, key: &Key, tokens: &[i32], state: &[u8]) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let bytes = encode(key, tokens, state);
        let mut file = tempfile::Builder::new()
            .prefix(".entry-")
            .tempfile_in(&self.dir)?;
        file.write_all(&bytes)?;
        file.persist(self.path(key)).map_err(|e| e.error)?;
        trim(&self.dir, MAX_CACHE_BYTES);
        Ok(())
    }
}

/// Adds a file's canonical path, length and modification time to `hash`.
fn file_identity(hash: &mut Sha256, path: &Path) -> Option<()> {
    let path = path.canonicalize().ok()?;
    let meta = std::fs::metadata(&path).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    hash.update(path.as_os_str().as_encoded_bytes());
    hash.update([0]);
    hash.update(meta.len().to_le_bytes());
    hash.update(modified.as_nanos().to_le_bytes());
    Some(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The whole file, unless it is larger than `cap` (checked before anything is allocated).
fn read_capped(path: &Path, cap: u64) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    if len > cap {
        return None;
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn encode(key: &Key, tokens: &[i32], state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + tokens.len() * 4 + state.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(state));
    for t in tokens {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out.extend_from_slice(state);
    out
}

/// The state in `bytes` if they are an entry for exactly `key` and `tokens`, whole.
fn decode<'b>(bytes: &'b [u8], key: &Key, tokens: &[i32]) -> Result<&'b [u8], &'static str> {
    let mut at = 0;
    let mut take = |n: usize| -> Result<&'b [u8], &'static str> {
        let end = at + n;
        let part = bytes.get(at..end).ok_or("the file ends early")?;
        at = end;
        Ok(part)
    };
    if take(8)? != MAGIC {
        return Err("not a prompt cache entry");
    }
    if take(4)? != VERSION.to_le_bytes() {
        return Err("another version's entry");
    }
    if take(32)? != key.0 {
        return Err("another key's entry");
    }
    let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "bad count")?) as usize;
    let state_len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| "bad length")?);
    let digest = take(32)?;
    if count != tokens.len() {
        return Err("another prefix's entry");
    }
    let stored = take(count * 4)?;
    if stored
        .chunks_exact(4)
        .zip(tokens)
        .any(|(b, t)| b != t.to_le_bytes())
    {
        return Err("another prefix's entry");
    }
    let remaining = (bytes.len() - HEADER_BYTES - count * 4) as u64;
    if state_len != remaining {
        return Err("the file's length does not match its header");
    }
    let state = &bytes[bytes.len() - remaining as usize..];
    if Sha256::digest(state).as_slice() != digest {
        return Err("its digest does not match");
    }
    Ok(state)
}

/// Removes the least recently used entries until the folder's entries fit in `budget` bytes.
fn trim(dir: &Path, budget: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = read
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == SUFFIX))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    entries.sort();
    for (_, len, path) in entries {
        if total <= budget {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Key {
        Key([byte; 32])
    }

    #[test]
    fn an_entry_reads_back_only_for_its_key_and_tokens() {
        let state: Vec<u8> = (0..=255).collect();
        let bytes = encode(&key(1), &[5, 6, 7], &state);
        assert_eq!(decode(&bytes, &key(1), &[5, 6, 7]), Ok(&state[..]));
        assert_eq!(
            decode(&bytes, &key(2), &[5, 6, 7]),
            Err("another key's entry")
        );
        assert_eq!(
            decode(&bytes, &key(1), &[5, 6, 8]),
            Err("another prefix's entry")
        );
        assert_eq!(
            decode(&bytes, &key(1), &[5, 6]),
            Err("another prefix's entry")
        );
    }

    #[test]
    fn a_cut_or_altered_entry_is_refused() {
        let state = vec![9u8; 1000];
        let bytes = encode(&key(1), &[1, 2], &state);
        for cut in [0, 7, HEADER_BYTES, HEADER_BYTES + 8, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], &key(1), &[1, 2]).is_err(), "{cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, &key(1), &[1, 2]).is_err());
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            decode(&flipped, &key(1), &[1, 2]),
            Err("its digest does not match")
        );
        let mut other_version = bytes;
        other_version[8] = 2;
        assert!(decode(&other_version, &key(1), &[1, 2]).is_err());
    }

    #[test]
    fn a_folder_keeps_the_newest_entries_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PromptCache {
            dir: dir.path().join("prompts"),
            identity: [0; 32],
        };
        let settings = SessionSettings {
            threads: 2,
            batch_size: 512,
            kv_cache: crate::KvCacheType::F16,
        };
        let keys: Vec<Key> = (0..3).map(|i| cache.key(settings, &[i])).collect();
        for (i, k) in keys.iter().enumerate() {
            cache.store(k, &[i as i32], &[i as u8; 100]).unwrap();
            // Distinct modification times for the order of use.
            let file = std::fs::File::options()
                .write(true)
                .open(cache.path(k))
                .unwrap();
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            file.set_modified(at).unwrap();
        }
        assert_eq!(cache.load(&keys[0], &[0]), Some(vec![0u8; 100]));
        // The first was used last, so the second is the oldest now.
        let one = std::fs::metadata(cache.path(&keys[0])).unwrap().len();
        trim(&cache.dir, 2 * one);
        assert!(cache.path(&keys[0]).exists());
        assert!(!cache.path(&keys[1]).exists());
        assert!(cache.path(&keys[2]).exists());
        // A damaged entry is a miss and is removed.
        std::fs::write(cache.path(&keys[2]), b"CATENAKV").unwrap();
        assert_eq!(cache.load(&keys[2], &[2]), None);
        assert!(!cache.path(&keys[2]).exists());
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(&cache.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn the_key_changes_with_every_setting_and_token() {
        let cache = PromptCache {
            dir: PathBuf::new(),
            identity: [0; 32],
        };
        let base = SessionSettings {
            threads: 2,
            batch_size: 512,
            kv_cache: crate::KvCacheType::F16,
        };
        let k = cache.key(base, &[1, 2, 3]);
        assert_eq!(k, cache.key(base, &[1, 2, 3]));
        assert_ne!(k, cache.key(base, &[1, 2, 4]));
        assert_ne!(k, cache.key(base, &[1, 2]));
        for other in [
            SessionSettings { threads: 1, ..base },
            SessionSettings {
                batch_size: 256,
                ..base
            },
            SessionSettings {
                kv_cache: crate::KvCacheType::Q8_0,
                ..base
            },
        ] {
            assert_ne!(k, cache.key(other, &[1, 2, 3]));
        }
    }
}
