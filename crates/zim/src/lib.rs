//! A reader of ZIM archives (the openZIM format Kiwix uses for offline Wikipedia, Stack Exchange
//! and documentation sites), enough to index their HTML articles.
//!
//! Written here rather than taken from the `zim` crate, which is unmaintained and pulls an old
//! memory-mapping and xz stack: indexing needs only the header, the MIME list, the directory
//! entries and the clusters, read in order, with the decompressors the format names (zstd, and
//! xz in archives made before 2021).
//!
//! Layout (openZIM format, major version 5 or 6): an 80-byte little-endian header; a list of
//! MIME types; a pointer list to the directory entries (sorted by path); a pointer list to the
//! clusters. An entry names its namespace (`C` content in current archives, `A` articles in old
//! ones), path, title and MIME type, and either a (cluster, blob) pair or the entry it redirects
//! to. A cluster is one info byte (compression in its low four bits, `0x10` for 64-bit offsets)
//! and then, compressed or not, a table of blob offsets followed by the blobs.
//!
//! Archives come from anywhere, so every size the file states is checked before it is used, and
//! what decompression makes is bounded twice: per cluster ([`MAX_CLUSTER_BYTES`]) and per
//! archive (a multiple of its size, [`ZimArchive::inflate_budget`]), since a few kilobytes of
//! zstd can stand for gigabytes. Entries that point at the same blob are one article under
//! several names (like redirects) and are listed once, so a blob is read once whatever the
//! number of entries naming it.
//!
//! A crate of its own, with no index engine behind it, so the fuzzer can build it quickly.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const MAGIC: u32 = 0x044D_495A;
const HEADER_BYTES: usize = 80;
/// Entries of these MIME indexes are not content.
const REDIRECT: u16 = 0xffff;
const LINK_TARGET: u16 = 0xfffe;
const DELETED: u16 = 0xfffd;
/// A decompressed cluster larger than this is refused (libzim writes 2 MiB clusters; this only
/// stops a hostile archive from exhausting memory).
pub const MAX_CLUSTER_BYTES: u64 = 128 << 20;
/// Times its own size an archive may decompress to in all. Kiwix's archives of HTML come out at
/// a few times their size (zstd at level 19 on text); far more is a decompression bomb.
pub const MAX_EXPANSION: u64 = 32;
/// What any archive, however small, may decompress to in all.
pub const MIN_INFLATE_BUDGET: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ZimError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a ZIM archive ({reason})")]
    NotZim { path: PathBuf, reason: String },
    #[error("{path}: cluster {cluster} cannot be read: {reason}")]
    Cluster {
        path: PathBuf,
        cluster: u32,
        reason: String,
    },
    #[error(
        "{path}: its clusters decompress to more than {} MiB in all, far more than an archive of its size holds (a decompression bomb?); reading stopped",
        budget >> 20
    )]
    Inflated { path: PathBuf, budget: u64 },
}

/// One content entry of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZimEntry {
    /// The path inside its namespace (`wiki/Tides.html`, `Alan_Turing`).
    pub path: String,
    pub title: String,
    pub mime: String,
    cluster: u32,
    blob: u32,
}

/// An open archive: a file, or any bytes that can be read and sought in (the fuzzer's).
pub struct ZimArchive<R = File> {
    path: PathBuf,
    file: BufReader<R>,
    len: u64,
    entry_count: u32,
    cluster_count: u32,
    path_ptr_pos: u64,
    cluster_ptr_pos: u64,
    checksum_pos: u64,
    mimes: Vec<String>,
    /// Bytes the clusters read so far decompressed to.
    inflated: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(bytes)
}

impl ZimArchive<File> {
    pub fn open(path: &Path) -> Result<ZimArchive<File>, ZimError> {
        let io = |source| ZimError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        ZimArchive::from_reader(path, file, len)
    }
}

impl<R: Read + Seek> ZimArchive<R> {
    /// The archive in `reader`, `len` bytes long; `path` names it in errors.
    pub fn from_reader(path: &Path, reader: R, len: u64) -> Result<ZimArchive<R>, ZimError> {
        let not_zim = |reason: &str| ZimError::NotZim {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        let mut file = BufReader::new(reader);
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact(&mut header)
            .map_err(|_| not_zim("shorter than a ZIM header"))?;
        if u32_at(&header, 0) != MAGIC {
            return Err(not_zim("wrong magic number"));
        }
        let major = u16_at(&header, 4);
        if !(5..=6).contains(&major) {
            return Err(not_zim(&format!("format version {major} is not 5 or 6")));
        }
        let mut archive = ZimArchive {
            path: path.to_path_buf(),
            file,
            len,
            entry_count: u32_at(&header, 24),
            cluster_count: u32_at(&header, 28),
            path_ptr_pos: u64_at(&header, 32),
            cluster_ptr_pos: u64_at(&header, 48),
            checksum_pos: u64_at(&header, 72),
            mimes: Vec::new(),
            inflated: 0,
        };
        let tables_fit = [
            (archive.path_ptr_pos, archive.entry_count),
            (archive.cluster_ptr_pos, archive.cluster_count),
        ]
        .iter()
        .all(|&(pos, count)| {
            pos.checked_add(u64::from(count) * 8)
                .is_some_and(|end| end <= len)
        });
        if !tables_fit || archive.checksum_pos > len {
            return Err(not_zim("its pointer tables lie outside the file"));
        }
        let mime_list_pos = u64_at(&header, 56);
        archive.mimes = archive.read_mimes(mime_list_pos)?;
        Ok(archive)
    }

    /// Bytes of the archive file.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    /// Bytes this archive's clusters may decompress to in all: [`MAX_EXPANSION`] times its size,
    /// and at least [`MIN_INFLATE_BUDGET`].
    pub fn inflate_budget(&self) -> u64 {
        self.len
            .saturating_mul(MAX_EXPANSION)
            .max(MIN_INFLATE_BUDGET)
    }

    fn io(&self, source: std::io::Error) -> ZimError {
        ZimError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn broken(&self, reason: impl Into<String>) -> ZimError {
        ZimError::NotZim {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    fn read_mimes(&mut self, at: u64) -> Result<Vec<String>, ZimError> {
        self.file
            .seek(SeekFrom::Start(at))
            .map_err(|e| self.io(e))?;
        let mut mimes = Vec::new();
        loop {
            let (mime, _) = self.read_cstring()?;
            if mime.is_empty() {
                return Ok(mimes);
            }
            if mimes.len() >= usize::from(DELETED) {
                return Err(self.broken("its MIME list does not end"));
            }
            mimes.push(mime);
        }
    }

    /// A NUL-terminated string at the current position (at most 64 KiB), and the bytes it took
    /// (its NUL included).
    fn read_cstring(&mut self) -> Result<(String, u64), ZimError> {
        let mut bytes = Vec::new();
        loop {
            let mut byte = [0u8; 1];
            self.file
                .read_exact(&mut byte)
                .map_err(|_| self.broken("a string runs past the end of the file"))?;
            if byte[0] == 0 {
                let taken = bytes.len() as u64 + 1;
                return Ok((String::from_utf8_lossy(&bytes).into_owned(), taken));
            }
            if bytes.len() >= 1 << 16 {
                return Err(self.broken("a string is longer than 64 KiB"));
            }
            bytes.push(byte[0]);
        }
    }

    fn read_u64_at(&mut self, at: u64) -> Result<u64, ZimError> {
        let mut bytes = [0u8; 8];
        self.file
            .seek(SeekFrom::Start(at))
            .map_err(|e| self.io(e))?;
        self.file
            .read_exact(&mut bytes)
            .map_err(|_| self.broken("a pointer lies past the end of the file"))?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// The content entries (namespace `C`, or `A` in old archives; redirects and metadata left
    /// out) whose MIME type `wanted` accepts, in the order their data is stored, so reading them
    /// in turn decompresses each cluster once. Of entries that point at the same blob only the
    /// first (by storage order, then path) is kept: they are one article. The pointer table is read in one pass and the
    /// entries in file order, so the file is read forwards (an archive has millions of entries).
    pub fn entries(&mut self, wanted: impl Fn(&str) -> bool) -> Result<Vec<ZimEntry>, ZimError> {
        self.file
            .seek(SeekFrom::Start(self.path_ptr_pos))
            .map_err(|e| self.io(e))?;
        let mut offsets = Vec::with_capacity(self.entry_count as usize);
        let mut pointer = [0u8; 8];
        for _ in 0..self.entry_count {
            self.file
                .read_exact(&mut pointer)
                .map_err(|_| self.broken("its entry pointers run past the end of the file"))?;
            offsets.push(u64::from_le_bytes(pointer));
        }
        offsets.sort_unstable();
        let mut entries = Vec::new();
        // Where the reader is, so a short step forwards keeps its buffer.
        let mut position = u64::MAX;
        for at in offsets {
            match at.checked_sub(position) {
                Some(ahead) if ahead < 1 << 16 => self
                    .file
                    .seek_relative(ahead as i64)
                    .map_err(|e| self.io(e))?,
                _ => {
                    self.file
                        .seek(SeekFrom::Start(at))
                        .map_err(|e| self.io(e))?;
                }
            }
            let mut fixed = [0u8; 16];
            self.file.read_exact(&mut fixed).map_err(|_| {
                self.broken(format!("the entry at {at} lies past the end of the file"))
            })?;
            position = at + 16;
            let mime = u16_at(&fixed, 0);
            let namespace = fixed[3];
            if matches!(mime, REDIRECT | LINK_TARGET | DELETED) || !matches!(namespace, b'C' | b'A')
            {
                continue;
            }
            let (cluster, blob) = (u32_at(&fixed, 8), u32_at(&fixed, 12));
            let (path, path_bytes) = self.read_cstring()?;
            let (title, title_bytes) = self.read_cstring()?;
            position += path_bytes + title_bytes;
            let Some(mime) = self.mimes.get(usize::from(mime)) else {
                return Err(self.broken(format!(
                    "the entry at {at} names MIME type {mime}, not listed"
                )));
            };
            if !wanted(mime) {
                continue;
            }
            entries.push(ZimEntry {
                title: if title.is_empty() {
                    path.clone()
                } else {
                    title
                },
                path,
                mime: mime.clone(),
                cluster,
                blob,
            });
        }
        entries.sort_by(|a, b| (a.cluster, a.blob, &a.path).cmp(&(b.cluster, b.blob, &b.path)));
        entries.dedup_by_key(|e| (e.cluster, e.blob));
        Ok(entries)
    }

    /// The compressed bytes of `cluster` (its info byte first).
    fn raw_cluster(&mut self, cluster: u32) -> Result<Vec<u8>, ZimError> {
        if cluster >= self.cluster_count {
            return Err(self.cluster_error(cluster, "no such cluster"));
        }
        let start = self.read_u64_at(self.cluster_ptr_pos + u64::from(cluster) * 8)?;
        let end = if cluster + 1 < self.cluster_count {
            self.read_u64_at(self.cluster_ptr_pos + u64::from(cluster + 1) * 8)?
        } else {
            self.checksum_pos
        };
        if start >= end || end > self.len || end - start > MAX_CLUSTER_BYTES {
            return Err(self.cluster_error(cluster, "its bounds are wrong"));
        }
        self.file
            .seek(SeekFrom::Start(start))
            .map_err(|e| self.io(e))?;
        let mut raw = vec![0u8; (end - start) as usize];
        self.file.read_exact(&mut raw).map_err(|e| self.io(e))?;
        Ok(raw)
    }

    fn cluster_error(&self, cluster: u32, reason: impl Into<String>) -> ZimError {
        ZimError::Cluster {
            path: self.path.clone(),
            cluster,
            reason: reason.into(),
        }
    }

    /// The blobs of `cluster`, decompressed. Past the archive's [`Self::inflate_budget`] every
    /// cluster is refused with [`ZimError::Inflated`].
    pub fn cluster(&mut self, cluster: u32) -> Result<Cluster, ZimError> {
        let budget = self.inflate_budget();
        let left = budget.saturating_sub(self.inflated);
        let raw = self.raw_cluster(cluster)?;
        let limit = left.min(MAX_CLUSTER_BYTES);
        match Cluster::decode(&raw, limit) {
            Ok(decoded) => {
                self.inflated += decoded.data.len() as u64;
                Ok(decoded)
            }
            Err(DecodeError::Exceeds) if limit < MAX_CLUSTER_BYTES => {
                self.inflated = budget;
                Err(ZimError::Inflated {
                    path: self.path.clone(),
                    budget,
                })
            }
            Err(DecodeError::Exceeds) => Err(self.cluster_error(
                cluster,
                format!(
                    "it decompresses to more than {} MiB",
                    MAX_CLUSTER_BYTES >> 20
                ),
            )),
            Err(DecodeError::Malformed(reason)) => Err(self.cluster_error(cluster, reason)),
        }
    }
}

/// Why a cluster could not be decoded.
#[derive(Debug)]
enum DecodeError {
    /// It decompresses to more than it may.
    Exceeds,
    Malformed(String),
}

impl From<&str> for DecodeError {
    fn from(reason: &str) -> Self {
        DecodeError::Malformed(reason.to_string())
    }
}

impl From<String> for DecodeError {
    fn from(reason: String) -> Self {
        DecodeError::Malformed(reason)
    }
}

/// A decompressed cluster: its blobs, by number.
pub struct Cluster {
    data: Vec<u8>,
    offsets: Vec<u64>,
}

impl Cluster {
    /// Decodes a cluster as stored: its info byte, then the (compressed) offsets and blobs, in
    /// at most `limit` bytes.
    fn decode(raw: &[u8], limit: u64) -> Result<Cluster, DecodeError> {
        let (&info, body) = raw.split_first().ok_or("it is empty")?;
        let limited = |reader: &mut dyn Read| -> Result<Vec<u8>, DecodeError> {
            let mut data = Vec::new();
            reader
                .take(limit.saturating_add(1))
                .read_to_end(&mut data)
                .map_err(|e| e.to_string())?;
            if data.len() as u64 > limit {
                return Err(DecodeError::Exceeds);
            }
            Ok(data)
        };
        let data = match info & 0x0f {
            0 | 1 if body.len() as u64 > limit => return Err(DecodeError::Exceeds),
            0 | 1 => body.to_vec(),
            4 => limited(&mut liblzma::read::XzDecoder::new(body))?,
            5 => limited(&mut zstd::stream::read::Decoder::new(body).map_err(|e| e.to_string())?)?,
            other => {
                return Err(format!(
                    "compression {other} (zlib or bzip2, dropped from the format) is not read"
                )
                .into());
            }
        };
        let width = if info & 0x10 != 0 { 8 } else { 4 };
        let offset = |i: usize| -> Option<u64> {
            let bytes = data.get(i * width..(i + 1) * width)?;
            Some(if width == 8 {
                u64_at(bytes, 0)
            } else {
                u64::from(u32_at(bytes, 0))
            })
        };
        let first = offset(0).ok_or("its offset table is cut short")?;
        let count = (first as usize) / width;
        if count == 0 || !(first as usize).is_multiple_of(width) {
            return Err("its offset table is malformed".into());
        }
        let offsets: Vec<u64> = (0..count)
            .map(offset)
            .collect::<Option<_>>()
            .ok_or("its offset table is cut short")?;
        let ordered = offsets.windows(2).all(|w| w[0] <= w[1]);
        if !ordered || offsets.last().is_some_and(|&o| o > data.len() as u64) {
            return Err("its blob offsets are out of order or past its end".into());
        }
        Ok(Cluster { data, offsets })
    }

    /// Blob `n`, when the cluster has it.
    pub fn blob(&self, n: u32) -> Option<&[u8]> {
        let n = n as usize;
        let start = *self.offsets.get(n)? as usize;
        let end = *self.offsets.get(n + 1)? as usize;
        self.data.get(start..end)
    }
}

/// The bytes of each of `entries` (as [`ZimArchive::entries`] lists them: in storage order, so
/// each cluster is decompressed once), or why they cannot be read (the reading goes on), until
/// the archive has decompressed to its [`ZimArchive::inflate_budget`]: that error ends the
/// reading.
pub fn read_entries<R: Read + Seek>(
    archive: &mut ZimArchive<R>,
    entries: &[ZimEntry],
    mut each: impl FnMut(&ZimEntry, Result<&[u8], String>),
) -> Result<(), ZimError> {
    let mut current: Option<(u32, Result<Cluster, String>)> = None;
    for entry in entries {
        if current.as_ref().is_none_or(|(n, _)| *n != entry.cluster) {
            let cluster = match archive.cluster(entry.cluster) {
                Err(e @ ZimError::Inflated { .. }) => return Err(e),
                other => other.map_err(|e| e.to_string()),
            };
            current = Some((entry.cluster, cluster));
        }
        let bytes = match current.as_ref().map(|(_, c)| c) {
            Some(Ok(cluster)) => cluster
                .blob(entry.blob)
                .ok_or_else(|| format!("cluster {} has no blob {}", entry.cluster, entry.blob)),
            Some(Err(e)) => Err(e.clone()),
            None => continue,
        };
        each(entry, bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster as libzim writes one: offsets (relative to the data after the info byte), then
    /// the blobs.
    fn cluster_bytes(blobs: &[&[u8]], wide: bool) -> Vec<u8> {
        let width = if wide { 8 } else { 4 };
        let mut offsets = vec![(blobs.len() + 1) * width];
        for blob in blobs {
            offsets.push(offsets.last().unwrap() + blob.len());
        }
        let mut data = Vec::new();
        for o in offsets {
            if wide {
                data.extend_from_slice(&(o as u64).to_le_bytes());
            } else {
                data.extend_from_slice(&(o as u32).to_le_bytes());
            }
        }
        for blob in blobs {
            data.extend_from_slice(blob);
        }
        data
    }

    #[test]
    fn clusters_decode_uncompressed_zstd_and_xz() {
        let blobs: [&[u8]; 3] = [b"<p>one</p>", b"", b"<p>three</p>"];
        let plain = cluster_bytes(&blobs, false);
        let mut stored = vec![1u8];
        stored.extend_from_slice(&plain);
        let zstd = [vec![5u8], zstd::encode_all(&plain[..], 3).unwrap()].concat();
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&plain[..], 6)
            .read_to_end(&mut xz)
            .unwrap();
        let xz = [vec![4u8], xz].concat();
        let wide = [vec![0x15u8], {
            zstd::encode_all(&cluster_bytes(&blobs, true)[..], 3).unwrap()
        }]
        .concat();
        for raw in [stored, zstd, xz, wide] {
            let cluster = Cluster::decode(&raw, MAX_CLUSTER_BYTES).unwrap();
            assert_eq!(cluster.blob(0), Some(&b"<p>one</p>"[..]));
            assert_eq!(cluster.blob(1), Some(&b""[..]));
            assert_eq!(cluster.blob(2), Some(&b"<p>three</p>"[..]));
            assert_eq!(cluster.blob(3), None);
        }
    }

    #[test]
    fn broken_clusters_are_errors_not_panics() {
        for raw in [
            &[][..],
            &[1],
            &[1, 3, 0, 0, 0],
            &[1, 8, 0, 0, 0, 4, 0, 0, 0],
            &[1, 8, 0, 0, 0, 200, 0, 0, 0],
            &[2, 1, 2, 3],
            &[5, 1, 2, 3],
            &[4, 1, 2, 3],
        ] {
            assert!(Cluster::decode(raw, MAX_CLUSTER_BYTES).is_err(), "{raw:?}");
        }
        // A zstd bomb: far more zeroes than a cluster may hold.
        let bomb = zstd::encode_all(std::io::repeat(0).take(MAX_CLUSTER_BYTES + 10), 1).unwrap();
        let err = Cluster::decode(&[vec![5u8], bomb].concat(), MAX_CLUSTER_BYTES);
        assert!(matches!(err, Err(DecodeError::Exceeds)));
    }

    /// An entry of [`archive_bytes`]: its path (namespace `C`, MIME `text/html`) and the cluster
    /// and blob it points at.
    struct Entry<'a> {
        path: &'a str,
        cluster: u32,
        blob: u32,
    }

    /// A ZIM archive (format 6) written byte by byte: header, MIME list, entries, the entry and
    /// cluster pointer lists, then the clusters as given (info byte first).
    fn archive_bytes(entries: &[Entry], clusters: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_BYTES];
        let mime_list = out.len() as u64;
        out.extend_from_slice(b"text/html\0\0");
        let mut entry_at = Vec::new();
        for entry in entries {
            entry_at.push(out.len() as u64);
            out.extend_from_slice(&0u16.to_le_bytes()); // MIME: the first of the list
            out.extend_from_slice(&[0, b'C']); // no parameters; namespace
            out.extend_from_slice(&0u32.to_le_bytes()); // revision
            out.extend_from_slice(&entry.cluster.to_le_bytes());
            out.extend_from_slice(&entry.blob.to_le_bytes());
            out.extend_from_slice(entry.path.as_bytes());
            out.extend_from_slice(b"\0\0"); // the path, and an empty title
        }
        let path_ptrs = out.len() as u64;
        for at in &entry_at {
            out.extend_from_slice(&at.to_le_bytes());
        }
        let cluster_ptrs = out.len() as u64;
        let mut at = cluster_ptrs + 8 * clusters.len() as u64;
        for cluster in clusters {
            out.extend_from_slice(&at.to_le_bytes());
            at += cluster.len() as u64;
        }
        for cluster in clusters {
            out.extend_from_slice(cluster);
        }
        let checksum = out.len() as u64;
        out.extend_from_slice(&[0u8; 16]);
        out[..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&6u16.to_le_bytes());
        out[24..28].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        out[28..32].copy_from_slice(&(clusters.len() as u32).to_le_bytes());
        out[32..40].copy_from_slice(&path_ptrs.to_le_bytes());
        out[48..56].copy_from_slice(&cluster_ptrs.to_le_bytes());
        out[56..64].copy_from_slice(&mime_list.to_le_bytes());
        out[72..80].copy_from_slice(&checksum.to_le_bytes());
        out
    }

    fn zstd_cluster(blobs: &[&[u8]]) -> Vec<u8> {
        [
            vec![5u8],
            zstd::encode_all(&cluster_bytes(blobs, false)[..], 1).unwrap(),
        ]
        .concat()
    }

    #[test]
    fn entries_that_share_a_blob_are_read_once() {
        // The attack's shape: thousands of entries naming one large blob.
        let big = "<p>tide</p>".repeat(100_000);
        let clusters = [zstd_cluster(&[big.as_bytes(), b"<p>own</p>"])];
        let paths: Vec<String> = (0..5_000).map(|i| format!("alias/{i:05}")).collect();
        let mut entries: Vec<Entry> = paths
            .iter()
            .map(|path| Entry {
                path,
                cluster: 0,
                blob: 0,
            })
            .collect();
        entries.push(Entry {
            path: "own",
            cluster: 0,
            blob: 1,
        });
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("aliases.zim");
        std::fs::write(&file, archive_bytes(&entries, &clusters)).unwrap();
        let mut archive = ZimArchive::open(&file).unwrap();
        let listed = archive.entries(|mime| mime == "text/html").unwrap();
        let paths: Vec<&str> = listed.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["alias/00000", "own"]);
        let mut read = Vec::new();
        read_entries(&mut archive, &listed, |entry, bytes| {
            read.push((entry.path.clone(), bytes.map(<[u8]>::len)));
        })
        .unwrap();
        assert_eq!(
            read,
            [
                ("alias/00000".to_string(), Ok(big.len())),
                ("own".to_string(), Ok(10))
            ]
        );
    }

    #[test]
    fn an_archive_decompresses_to_a_bounded_total() {
        // Each cluster is within the per-cluster cap; together they pass the archive's budget
        // (the file is a few kilobytes, so the budget is the floor).
        let zeros = vec![0u8; 100 << 20];
        let bomb = zstd_cluster(&[&zeros]);
        let clusters = [
            bomb.clone(),
            bomb.clone(),
            bomb,
            zstd_cluster(&[b"<p>late</p>"]),
        ];
        let entries: Vec<Entry> = (0..4)
            .map(|n| Entry {
                path: ["a", "b", "c", "d"][n as usize],
                cluster: n,
                blob: 0,
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bomb.zim");
        let bytes = archive_bytes(&entries, &clusters);
        assert!(bytes.len() < 64 << 10, "{}", bytes.len());
        std::fs::write(&file, bytes).unwrap();
        let mut archive = ZimArchive::open(&file).unwrap();
        assert_eq!(archive.inflate_budget(), MIN_INFLATE_BUDGET);
        let listed = archive.entries(|_| true).unwrap();
        let mut read = Vec::new();
        let err = read_entries(&mut archive, &listed, |entry, bytes| {
            read.push((entry.path.clone(), bytes.is_ok()));
        })
        .unwrap_err();
        assert!(matches!(err, ZimError::Inflated { .. }), "{err}");
        assert!(
            err.to_string().contains("more than 256 MiB in all"),
            "{err}"
        );
        assert_eq!(read, [("a".to_string(), true), ("b".to_string(), true)]);
        // The budget stays spent: nothing more is decompressed.
        assert!(matches!(archive.cluster(3), Err(ZimError::Inflated { .. })));
    }

    #[test]
    fn files_that_are_not_archives_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.zim");
        std::fs::write(&short, b"ZIM").unwrap();
        let wrong = dir.path().join("wrong.zim");
        std::fs::write(&wrong, [0u8; 200]).unwrap();
        let mut lying = vec![0u8; 200];
        lying[..4].copy_from_slice(&MAGIC.to_le_bytes());
        lying[4] = 6;
        lying[24] = 10;
        lying[32..40].copy_from_slice(&1_000_000u64.to_le_bytes());
        let lies = dir.path().join("lies.zim");
        std::fs::write(&lies, lying).unwrap();
        for (file, reason) in [
            (&short, "shorter than"),
            (&wrong, "magic"),
            (&lies, "outside the file"),
        ] {
            let err = ZimArchive::open(file).err().unwrap().to_string();
            assert!(err.contains(reason), "{err}");
        }
    }
}
