//! Reading a GGUF file's header in Rust before llama.cpp sees it.
//!
//! llama.cpp answers a broken file with a bare null pointer; this reader says what is wrong (not a
//! GGUF file, an unsupported version, a header that runs past the end, tensor data missing from a
//! cut-off download) and gives the facts later checks need (architecture, file type, tensors).
//! It never trusts a length field: every count and size is checked against the bytes that are
//! actually there, so a hostile file cannot make it allocate or loop without bound.

use std::collections::BTreeMap;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufReader, Read};
use std::path::Path;

use hashbrown::hash_table::{Entry, HashTable};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Longer arrays are summarised (type and length) rather than kept.
const KEPT_ARRAY_LEN: u64 = 64;
/// No key or string value in a sane model is longer (chat templates are tens of kilobytes).
const MAX_STRING: u64 = 16 << 20;
const MAX_DIMS: u32 = 8;
/// The vocabulary's key: its tokens are checked as they are read (see [`Reader::tokens`]).
const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
/// The most tokens a vocabulary may hold: four times the largest published one (262,144), the
/// converter's bound too. What checking them holds in memory is proportional.
const MAX_TOKENS: u64 = 1 << 20;
/// The most bytes a vocabulary's texts may hold together, all of which the check keeps in memory
/// at once: the largest published vocabularies hold a few megabytes.
const MAX_VOCABULARY_BYTES: u64 = 64 << 20;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A short array, kept whole.
    Array(Vec<MetaValue>),
    /// A long array (a vocabulary, merges), summarised.
    LongArray {
        element_type: u32,
        len: u64,
    },
}

impl MetaValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Bytes of tensor data, when the type is known.
    pub fn data_len(&self) -> Option<u64> {
        let (block, type_size) = ggml_type_layout(self.ggml_type)?;
        let elements = self
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
        (elements / block).checked_mul(type_size)
    }
}

/// The parsed header of a GGUF file.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
    pub file_len: u64,
}

/// What is wrong with a file that claims to be a GGUF model.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read the file: {0}")]
    Io(#[from] std::io::Error),
    #[error("the file is empty")]
    Empty,
    /// The file's own bytes are not repeated: an error may reach whoever asked to load it.
    #[error("not a GGUF file (a GGUF file starts with the bytes \"GGUF\")")]
    NotGguf,
    #[error("GGUF version {0} is not supported (versions 2 and 3 are)")]
    UnsupportedVersion(u32),
    #[error(
        "the file is truncated: {what} needs {needed} bytes at offset {offset}, but the file has {file_len} (an interrupted download?)"
    )]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    #[error("malformed header: {0}")]
    Malformed(String),
}

impl GgufHeader {
    /// Reads the header of the file at `path`.
    pub fn read(path: &Path) -> Result<GgufHeader, GgufError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        GgufHeader::parse(BufReader::new(file), len)
    }

    /// Parses a header from `reader`, which holds `file_len` bytes in all.
    pub fn parse(reader: impl Read, file_len: u64) -> Result<GgufHeader, GgufError> {
        if file_len == 0 {
            return Err(GgufError::Empty);
        }
        let mut r = Reader {
            inner: reader,
            pos: 0,
            len: file_len,
        };
        let magic = r.bytes(4.min(file_len), "the magic number")?;
        if magic.as_slice() != MAGIC {
            return Err(GgufError::NotGguf);
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = r.u64("the tensor count")?;
        let kv_count = r.u64("the metadata count")?;
        let mut metadata = BTreeMap::new();
        for i in 0..kv_count {
            let key = r.string(&format!("metadata key {i}"))?;
            let value_type = r.u32(&format!("the type of {key}"))?;
            let value = r.value(value_type, &key, 0)?;
            // llama.cpp refuses a file with a key twice; a map would keep one of them quietly.
            if metadata.contains_key(&key) {
                return Err(GgufError::Malformed(format!("the key {key} appears twice")));
            }
            metadata.insert(key, value);
        }
        let mut tensors = Vec::new();
        for i in 0..tensor_count {
            let name = r.string(&format!("tensor name {i}"))?;
            let n_dims = r.u32(&format!("the dimensions of {name}"))?;
            if n_dims > MAX_DIMS {
                return Err(GgufError::Malformed(format!(
                    "tensor {name} claims {n_dims} dimensions"
                )));
            }
            let dims = (0..n_dims)
                .map(|_| r.u64(&format!("the shape of {name}")))
                .collect::<Result<Vec<_>, _>>()?;
            let ggml_type = r.u32(&format!("the type of {name}"))?;
            let offset = r.u64(&format!("the offset of {name}"))?;
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        // As llama.cpp reads it: a file with any other alignment is one it refuses, and one
        // that candle (the trainer's reader) divides by.
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(MetaValue::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(other) => {
                return Err(GgufError::Malformed(format!(
                    "general.alignment is {other:?}; it must be a power of two stored as a \
                     32-bit unsigned integer"
                )));
            }
        };
        let data_offset = r.pos.div_ceil(alignment) * alignment;
        Ok(GgufHeader {
            version,
            metadata,
            tensors,
            data_offset,
            file_len,
        })
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(MetaValue::as_str)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.metadata.get(key).and_then(MetaValue::as_u64)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// `general.type` (`model`, `adapter`, ...); absent in older files, which are models.
    pub fn file_type(&self) -> Option<&str> {
        self.get_str("general.type")
    }

    /// Checks that every tensor's data lies inside the file.
    pub fn check_data_present(&self) -> Result<(), GgufError> {
        for t in &self.tensors {
            let Some(len) = t.data_len() else {
                return Err(GgufError::Malformed(format!(
                    "tensor {} has unknown type {}",
                    t.name, t.ggml_type
                )));
            };
            let start = self.data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(len));
            match (start, end) {
                (Some(_), Some(end)) if end <= self.file_len => {}
                (start, _) => {
                    return Err(GgufError::Truncated {
                        what: format!("the data of tensor {}", t.name),
                        offset: start.unwrap_or(u64::MAX),
                        needed: len,
                        file_len: self.file_len,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The ggml tensor types the vendored ggml knows: (id, name, elements per block, bytes per block).
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

fn ggml_type(ggml_type: u32) -> Option<&'static (u32, &'static str, u64, u64)> {
    GGML_TYPES.iter().find(|t| t.0 == ggml_type)
}

/// (elements per block, bytes per block) of a ggml tensor type.
pub fn ggml_type_layout(ggml_type: u32) -> Option<(u64, u64)> {
    self::ggml_type(ggml_type).map(|&(_, _, block, size)| (block, size))
}

/// A ggml tensor type's name (`type 99` for one the bundled ggml does not know).
pub fn ggml_type_name(ggml_type: u32) -> String {
    self::ggml_type(ggml_type).map_or_else(|| format!("type {ggml_type}"), |t| t.1.to_string())
}

/// A bounds-checked little-endian reader.
struct Reader<R> {
    inner: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Reader<R> {
    fn need(&self, n: u64, what: &str) -> Result<(), GgufError> {
        if self.pos.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(self.truncated(n, what));
        }
        Ok(())
    }

    /// The file ends before the `n` bytes of `what` at the current position.
    fn truncated(&self, n: u64, what: &str) -> GgufError {
        GgufError::Truncated {
            what: what.to_string(),
            offset: self.pos,
            needed: n,
            file_len: self.len,
        }
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, GgufError> {
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.inner.read_exact(&mut buf)?;
        self.pos += n;
        Ok(buf)
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), GgufError> {
        self.need(n, what)?;
        let copied = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())?;
        if copied != n {
            return Err(self.truncated(n, what));
        }
        self.pos += n;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        self.need(N as u64, what)?;
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf)?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(GgufError::Malformed(format!(
                "{what} claims a string of {len} bytes"
            )));
        }
        let bytes = self.bytes(len, what)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn value(&mut self, value_type: u32, key: &str, depth: u32) -> Result<MetaValue, GgufError> {
        Ok(match value_type {
            0 => MetaValue::U8(u8::from_le_bytes(self.array(key)?)),
            1 => MetaValue::I8(i8::from_le_bytes(self.array(key)?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(key)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(key)?)),
            4 => MetaValue::U32(u32::from_le_bytes(self.array(key)?)),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(key)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(key)?)),
            7 => MetaValue::Bool(u8::from_le_bytes(self.array(key)?) != 0),
            8 => MetaValue::String(self.string(key)?),
            9 => {
                if depth > 0 {
                    return Err(GgufError::Malformed(format!("{key}: nested arrays")));
                }
                let element_type = self.u32(key)?;
                let len = self.u64(key)?;
                if key == TOKENS_KEY && element_type == 8 {
                    self.tokens(len)?;
                    return Ok(MetaValue::LongArray { element_type, len });
                }
                if len <= KEPT_ARRAY_LEN {
                    let items = (0..len)
                        .map(|_| self.value(element_type, key, depth + 1))
                        .collect::<Result<Vec<_>, _>>()?;
                    MetaValue::Array(items)
                } else {
                    self.skip_array(element_type, len, key)?;
                    MetaValue::LongArray { element_type, len }
                }
            }
            10 => MetaValue::U64(u64::from_le_bytes(self.array(key)?)),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(key)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(key)?)),
            other => {
                return Err(GgufError::Malformed(format!(
                    "{key} has unknown value type {other}"
                )));
            }
        })
    }

    /// Reads the vocabulary's `len` tokens and checks that no text is there twice: llama.cpp
    /// aborts the whole process (`GGML_ASSERT`, llama-vocab.cpp) on loading such a vocabulary.
    /// An empty token counts as `[EMPTY_<id>]`, the text llama.cpp puts in its place. The texts
    /// are held at once (at most [`MAX_VOCABULARY_BYTES`]) and compared by their bytes.
    fn tokens(&mut self, len: u64) -> Result<(), GgufError> {
        if len > MAX_TOKENS {
            return Err(GgufError::Malformed(format!(
                "{TOKENS_KEY} holds {len} tokens; a vocabulary has at most {MAX_TOKENS}"
            )));
        }
        // Every token takes at least its 8-byte length: a count the file cannot hold is refused
        // before anything is sized for it.
        self.need(len * 8, TOKENS_KEY)?;
        // One buffer for all the texts and a table of their ids, not an allocation per token:
        // reading the default model's header took 55 ms with one (and two digests a token), 19 ms
        // without the check.
        let mut texts: Vec<u8> = Vec::with_capacity(len as usize * 8);
        let mut ends: Vec<u32> = Vec::with_capacity(len as usize);
        // Named once, not per token: a message for each of 150,000 tokens cost more than the
        // reading.
        let what = "a token of tokenizer.ggml.tokens";
        for id in 0..len {
            let n = self.u64(what)?;
            if n > MAX_STRING {
                return Err(GgufError::Malformed(format!("token {id} claims {n} bytes")));
            }
            self.need(n, what)?;
            if texts.len() as u64 + n > MAX_VOCABULARY_BYTES {
                return Err(GgufError::Malformed(format!(
                    "the texts of {TOKENS_KEY} run past {MAX_VOCABULARY_BYTES} bytes by token {id}"
                )));
            }
            let read = (&mut self.inner).take(n).read_to_end(&mut texts)?;
            if read as u64 != n {
                return Err(self.truncated(n, what));
            }
            self.pos += n;
            if n == 0 {
                texts.extend_from_slice(format!("[EMPTY_{id}]").as_bytes());
            }
            // Below MAX_VOCABULARY_BYTES plus one `[EMPTY_<id>]`, far below u32::MAX.
            ends.push(texts.len() as u32);
        }
        let text = |id: u32| {
            let start = match id {
                0 => 0,
                _ => ends[id as usize - 1] as usize,
            };
            &texts[start..ends[id as usize] as usize]
        };
        let state = std::hash::RandomState::new();
        let mut seen: HashTable<u32> = HashTable::with_capacity(ends.len());
        for id in 0..ends.len() as u32 {
            let hash = state.hash_one(text(id));
            match seen.entry(
                hash,
                |&other| text(other) == text(id),
                |&other| state.hash_one(text(other)),
            ) {
                Entry::Occupied(earlier) => {
                    return Err(GgufError::Malformed(format!(
                        "the tokens {} and {id} of the vocabulary are the same text ({:?}); \
                         llama.cpp cannot load a vocabulary that holds a token twice",
                        earlier.get(),
                        String::from_utf8_lossy(text(id))
                    )));
                }
                Entry::Vacant(slot) => {
                    slot.insert(id);
                }
            }
        }
        Ok(())
    }

    fn skip_array(&mut self, element_type: u32, len: u64, key: &str) -> Result<(), GgufError> {
        let fixed = match element_type {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        };
        match (fixed, element_type) {
            (Some(size), _) => {
                let total = len.checked_mul(size).ok_or_else(|| {
                    GgufError::Malformed(format!("{key}: array of {len} elements"))
                })?;
                self.skip(total, key)
            }
            (None, 8) => {
                for _ in 0..len {
                    let n = self.u64(key)?;
                    self.skip(n, key)?;
                }
                Ok(())
            }
            (None, other) => Err(GgufError::Malformed(format!(
                "{key}: array of unsupported type {other}"
            ))),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal GGUF writer for tests: metadata strings, u32s and arrays of either, and F32
    /// tensors.
    pub(crate) fn write_gguf(
        kv: &[(&str, MetaValue)],
        tensors: &[(&str, Vec<u64>)],
        with_data: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
        let put_str = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        for (k, v) in kv {
            put_str(&mut out, k);
            match v {
                MetaValue::String(s) => {
                    out.extend_from_slice(&8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
                MetaValue::U32(n) => {
                    out.extend_from_slice(&4u32.to_le_bytes());
                    out.extend_from_slice(&n.to_le_bytes());
                }
                MetaValue::Array(items) => {
                    let numbers = matches!(items.first(), Some(MetaValue::U32(_)));
                    out.extend_from_slice(&9u32.to_le_bytes());
                    out.extend_from_slice(&(if numbers { 4u32 } else { 8 }).to_le_bytes());
                    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                    for item in items {
                        match item {
                            MetaValue::U32(n) if numbers => out.extend_from_slice(&n.to_le_bytes()),
                            _ => put_str(&mut out, item.as_str().expect("strings or u32s")),
                        }
                    }
                }
                other => panic!("test writer does not write {other:?}"),
            }
        }
        let mut offset = 0u64;
        let mut sizes = Vec::new();
        for (name, dims) in tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            let size = dims.iter().product::<u64>() * 4;
            sizes.push(size);
            offset += size.div_ceil(32) * 32;
        }
        if with_data {
            while out.len() % 32 != 0 {
                out.push(0);
            }
            out.resize(out.len() + offset as usize, 0);
        }
        out
    }

    fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
        GgufHeader::parse(bytes, bytes.len() as u64)
    }

    #[test]
    fn reads_metadata_and_tensors() {
        let bytes = write_gguf(
            &[
                ("general.architecture", MetaValue::String("qwen2".into())),
                ("qwen2.block_count", MetaValue::U32(24)),
            ],
            &[("a", vec![4, 8]), ("b", vec![16])],
            true,
        );
        let h = parse(&bytes).unwrap();
        assert_eq!(h.version, 3);
        assert_eq!(h.architecture(), Some("qwen2"));
        assert_eq!(h.get_u64("qwen2.block_count"), Some(24));
        assert_eq!(h.tensors.len(), 2);
        assert_eq!(h.tensors[1].offset, 128);
        assert_eq!(h.data_offset % 32, 0);
        h.check_data_present().unwrap();
    }

    #[test]
    fn an_alignment_is_a_power_of_two_as_llama_cpp_reads_it() {
        let with = |alignment: MetaValue| {
            let kv = [("general.alignment", alignment)];
            parse(&write_gguf(&kv, &[("a", vec![4])], true))
        };
        assert_eq!(with(MetaValue::U32(64)).unwrap().data_offset % 64, 0);
        // Zero was read as 32 here while candle, reading the same file for the trainer,
        // divided by it.
        for refused in [
            MetaValue::U32(0),
            MetaValue::U32(48),
            MetaValue::String("32".into()),
        ] {
            let err = with(refused.clone()).unwrap_err().to_string();
            assert!(
                err.contains("general.alignment") && err.contains("power of two"),
                "{refused:?}: {err}"
            );
        }
    }

    #[test]
    fn a_vocabulary_with_a_token_twice_is_malformed() {
        let with = |tokens: &[&str]| {
            let items = tokens.iter().map(|t| MetaValue::String(t.to_string()));
            let kv = [(TOKENS_KEY, MetaValue::Array(items.collect()))];
            parse(&write_gguf(&kv, &[("a", vec![4])], true))
        };
        let h = with(&["a", "b", "", "ab"]).unwrap();
        assert_eq!(
            h.metadata.get(TOKENS_KEY),
            Some(&MetaValue::LongArray {
                element_type: 8,
                len: 4
            })
        );
        // llama.cpp aborted on loading either.
        let err = with(&["a", "b", "a"]).unwrap_err().to_string();
        assert!(err.contains("the tokens 0 and 2"), "{err}");
        let err = with(&["a", "", "[EMPTY_1]"]).unwrap_err().to_string();
        assert!(err.contains("the tokens 1 and 2"), "{err}");
    }

    #[test]
    fn a_vocabulary_is_held_within_its_bounds() {
        // Tokens of the longest string allowed: the fifth passes what the check may hold.
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&(TOKENS_KEY.len() as u64).to_le_bytes());
        bytes.extend_from_slice(TOKENS_KEY.as_bytes());
        bytes.extend_from_slice(&9u32.to_le_bytes());
        bytes.extend_from_slice(&8u32.to_le_bytes());
        bytes.extend_from_slice(&5u64.to_le_bytes());
        let header = bytes.len();
        for letter in b'a'..=b'e' {
            bytes.extend_from_slice(&MAX_STRING.to_le_bytes());
            bytes.resize(bytes.len() + MAX_STRING as usize, letter);
        }
        let err = parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("run past 67108864 bytes by token 4"), "{err}");
        // A file shorter than its stated length ends at the first token it cannot read.
        let cut = &bytes[..header + 8 + 100];
        let err = GgufHeader::parse(cut, bytes.len() as u64).unwrap_err();
        assert!(matches!(err, GgufError::Truncated { .. }), "{err}");
    }

    #[test]
    fn a_key_twice_is_malformed() {
        let kv = [
            ("general.name", MetaValue::String("a".into())),
            ("general.name", MetaValue::String("b".into())),
        ];
        let err = parse(&write_gguf(&kv, &[("a", vec![4])], true)).unwrap_err();
        assert!(
            err.to_string()
                .contains("the key general.name appears twice"),
            "{err}"
        );
    }

    #[test]
    fn missing_tensor_data_is_truncation() {
        let bytes = write_gguf(&[], &[("w", vec![1024])], false);
        let h = parse(&bytes).unwrap();
        let err = h.check_data_present().unwrap_err();
        assert!(matches!(err, GgufError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("tensor w"));
    }

    #[test]
    fn bad_files_are_named() {
        assert!(matches!(parse(b""), Err(GgufError::Empty)));
        assert!(matches!(parse(b"PK\x03\x04rest"), Err(GgufError::NotGguf)));
        assert!(matches!(parse(b"GG"), Err(GgufError::NotGguf)));
        let mut v9 = b"GGUF".to_vec();
        v9.extend_from_slice(&9u32.to_le_bytes());
        assert!(matches!(parse(&v9), Err(GgufError::UnsupportedVersion(9))));
        let whole = write_gguf(
            &[("general.architecture", MetaValue::String("qwen2".into()))],
            &[("t", vec![2])],
            false,
        );
        for cut in 8..whole.len() {
            assert!(
                matches!(parse(&whole[..cut]), Err(GgufError::Truncated { .. })),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn hostile_lengths_do_not_allocate() {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes()); // key length
        let err = parse(&bytes).unwrap_err();
        assert!(matches!(err, GgufError::Malformed(_)), "{err}");
        // A huge tensor count with no bytes behind it ends at the first missing byte.
        let mut many = b"GGUF".to_vec();
        many.extend_from_slice(&3u32.to_le_bytes());
        many.extend_from_slice(&u64::MAX.to_le_bytes());
        many.extend_from_slice(&0u64.to_le_bytes());
        assert!(matches!(parse(&many), Err(GgufError::Truncated { .. })));
    }
}
