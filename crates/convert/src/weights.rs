//! The weights of a checkpoint: one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`. Headers are read and checked up front (offsets contiguous, sizes
//! matching shapes and types, data inside the file); tensor bytes are then read by range, so a
//! 7B checkpoint never has to sit in memory.

use crate::error::ConvertError;
use safetensors::Dtype;
use safetensors::tensor::Metadata;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest safetensors header accepted (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// The element types a checkpoint's weights may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    F32,
    F16,
    BF16,
}

impl WeightType {
    pub fn size(self) -> u64 {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::BF16 => 2,
        }
    }
}

/// One tensor of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weight {
    pub name: String,
    pub weight_type: WeightType,
    /// Row-major, as PyTorch has it.
    pub shape: Vec<u64>,
    shard: usize,
    /// Absolute offset of the first byte in its shard.
    start: u64,
    len: u64,
}

impl Weight {
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// The checkpoint's weight files, open.
pub struct Weights {
    shards: Vec<(PathBuf, File)>,
    /// Every tensor, shard by shard, in the order of their data.
    pub tensors: Vec<Weight>,
}

impl Weights {
    /// Opens the safetensors weights in `dir`. A folder without any (a repository that publishes
    /// no weights) is an error that says so.
    pub fn open(dir: &Path) -> Result<Weights, ConvertError> {
        let index = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let (files, expected) = if index.is_file() {
            let text = std::fs::read(&index).map_err(ConvertError::io(&index))?;
            let json: serde_json::Value = serde_json::from_slice(&text)
                .map_err(|e| ConvertError::bad(&index, format!("not valid JSON: {e}")))?;
            let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
                return Err(ConvertError::bad(&index, "no `weight_map`"));
            };
            let mut expected = BTreeMap::new();
            for (name, file) in map {
                let Some(file) = file.as_str().filter(|f| is_shard_file_name(f)) else {
                    return Err(ConvertError::bad(
                        &index,
                        format!(
                            "`{name}` maps to something that is not a file name in this folder"
                        ),
                    ));
                };
                expected.insert(name.clone(), file.to_string());
            }
            let mut files: Vec<String> = expected.values().cloned().collect();
            files.sort();
            files.dedup();
            (files, Some(expected))
        } else if single.is_file() {
            (vec!["model.safetensors".to_string()], None)
        } else {
            return Err(ConvertError::Unsupported(format!(
                "{} holds no weights in the safetensors format (model.safetensors or \
                 model.safetensors.index.json): nothing to convert",
                dir.display()
            )));
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut tensors = Vec::new();
        for (i, name) in files.iter().enumerate() {
            let path = dir.join(name);
            let mut file = File::open(&path).map_err(ConvertError::io(&path))?;
            tensors.extend(read_header(&path, &mut file, i)?);
            shards.push((path, file));
        }
        if let Some(expected) = expected {
            // By name, not by scanning: a hostile index and headers may each list millions.
            let shard_of: HashMap<&str, usize> =
                tensors.iter().map(|t| (t.name.as_str(), t.shard)).collect();
            for (name, file) in &expected {
                let found = shard_of.get(name.as_str()).map(|&i| &shards[i].0);
                if found.and_then(|p| p.file_name()).and_then(|n| n.to_str()) != Some(file) {
                    return Err(ConvertError::bad(
                        &index,
                        format!("the index puts `{name}` in {file}, which does not hold it"),
                    ));
                }
            }
        }
        let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConvertError::bad(
                dir,
                format!("the tensor `{}` is in more than one shard", pair[0]),
            ));
        }
        Ok(Weights { shards, tensors })
    }

    /// Fills `buf` with the tensor's bytes from `offset` (relative to the tensor) on.
    pub fn read(
        &mut self,
        weight: &Weight,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ConvertError> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > weight.len) {
            return Err(ConvertError::bad(
                &self.shards[weight.shard].0,
                format!("a read past the end of `{}`", weight.name),
            ));
        }
        let (path, file) = &mut self.shards[weight.shard];
        file.seek(SeekFrom::Start(weight.start + offset))
            .and_then(|_| file.read_exact(buf))
            .map_err(ConvertError::io(path.as_path()))
    }

    /// Bytes of all weight files, for the disk check.
    pub fn total_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.len).sum()
    }
}

/// Whether a shard named in the index is a safetensors file in this folder: a foreign file name
/// (one path component) ending in `.safetensors`.
fn is_shard_file_name(name: &str) -> bool {
    catena_protocol::names::is_file_name(name) && name.ends_with(".safetensors")
}

fn read_header(path: &Path, file: &mut File, shard: usize) -> Result<Vec<Weight>, ConvertError> {
    let file_len = file.metadata().map_err(ConvertError::io(path))?.len();
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| ConvertError::bad(path, "shorter than a safetensors header"))?;
    let header_len = u64::from_le_bytes(len);
    if header_len > MAX_HEADER || 8 + header_len > file_len {
        return Err(ConvertError::bad(
            path,
            format!("the header claims {header_len} bytes; the file has {file_len}"),
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)
        .map_err(ConvertError::io(path))?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| ConvertError::bad(path, format!("an unreadable safetensors header: {e}")))?;
    let data_start = 8 + header_len;
    let data_len = file_len - data_start;
    let infos = metadata.tensors();
    let mut out = Vec::with_capacity(infos.len());
    for name in metadata.offset_keys() {
        let Some(info) = infos.get(&name) else {
            continue;
        };
        let weight_type = match info.dtype {
            Dtype::F32 => WeightType::F32,
            Dtype::F16 => WeightType::F16,
            Dtype::BF16 => WeightType::BF16,
            other => {
                return Err(ConvertError::Unsupported(format!(
                    "{}: the tensor `{name}` is {other:?}; Catena converts F32, F16 and BF16 \
                     weights (a checkpoint quantised by another tool cannot be converted)",
                    path.display()
                )));
            }
        };
        // The safetensors crate has checked that the offsets are contiguous and match each
        // shape and type; what it cannot know is whether the file holds that much data.
        let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
        let (start, end) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
        if end > data_len {
            return Err(ConvertError::bad(
                path,
                format!(
                    "`{name}` ends at byte {} of a file of {file_len} bytes (a cut-off download?)",
                    data_start + end
                ),
            ));
        }
        out.push(Weight {
            name,
            weight_type,
            shape,
            shard,
            start: data_start + start,
            len: end - start,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a safetensors file of `(name, dtype, shape, bytes)`.
    pub(crate) fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) {
        let mut header = serde_json::Map::new();
        let mut offset = 0usize;
        for (name, dtype, shape, bytes) in tensors {
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
            );
            offset += bytes.len();
        }
        let header = serde_json::to_vec(&header).unwrap();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&header);
        for (_, _, _, bytes) in tensors {
            file.extend_from_slice(bytes);
        }
        std::fs::write(path, file).unwrap();
    }

    #[test]
    fn shards_are_read_by_range_and_checked_against_the_index() {
        let dir = tempfile::tempdir().unwrap();
        write_safetensors(
            &dir.path().join("model-00001-of-00002.safetensors"),
            &[("a", "F32", vec![2], vec![0, 0, 128, 63, 0, 0, 0, 64])],
        );
        write_safetensors(
            &dir.path().join("model-00002-of-00002.safetensors"),
            &[("b", "BF16", vec![1, 2], vec![128, 63, 0, 64])],
        );
        let index = serde_json::json!({"weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}});
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            index.to_string(),
        )
        .unwrap();
        let mut weights = Weights::open(dir.path()).unwrap();
        assert_eq!(weights.tensors.len(), 2);
        let b = weights
            .tensors
            .iter()
            .find(|t| t.name == "b")
            .unwrap()
            .clone();
        assert_eq!(
            (b.weight_type, b.shape.clone()),
            (WeightType::BF16, vec![1, 2])
        );
        let mut buf = [0u8; 2];
        weights.read(&b, 2, &mut buf).unwrap();
        assert_eq!(buf, [0, 64]);
        assert!(weights.read(&b, 3, &mut buf).is_err());

        // An index that sends a tensor to the wrong shard.
        let index = serde_json::json!({"weight_map": {
            "a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}});
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            index.to_string(),
        )
        .unwrap();
        let err = Weights::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("does not hold it"), "{err}");
    }

    #[test]
    fn broken_files_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let err = |dir: &Path| Weights::open(dir).err().unwrap().to_string();
        assert!(err(dir.path()).contains("holds no weights"));

        // Cut off in the data.
        write_safetensors(&path, &[("a", "F32", vec![4], vec![0; 16])]);
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 4]).unwrap();
        assert!(err(dir.path()).contains("cut-off"), "{}", err(dir.path()));

        // A size that does not match the shape (the safetensors crate's own check names it).
        write_safetensors(&path, &[("a", "F32", vec![4], vec![0; 12])]);
        assert!(err(dir.path()).contains("offset"), "{}", err(dir.path()));

        // A quantised type.
        write_safetensors(&path, &[("a", "I8", vec![4], vec![0; 4])]);
        assert!(err(dir.path()).contains("I8"));

        // A header length larger than the file.
        std::fs::write(&path, u64::MAX.to_le_bytes()).unwrap();
        assert!(err(dir.path()).contains("header claims"));

        // Not JSON.
        let mut file = 4u64.to_le_bytes().to_vec();
        file.extend_from_slice(b"nope");
        std::fs::write(&path, file).unwrap();
        assert!(err(dir.path()).contains("unreadable"));
    }
}
