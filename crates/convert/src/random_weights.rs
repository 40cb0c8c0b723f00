//! A model of a real model's exact shape with random weights, for benchmarks where the real
//! weights cannot go (a lent GPU machine takes tens of megabytes, the default model is 470 MB).
//!
//! The real file's header is copied byte for byte (metadata, tokenizer, chat template, the tensor
//! table), so llama.cpp builds the same graph with the same tensor types; the data after it is
//! pseudo-random, with every block's scale a small finite number so that no NaN or infinity
//! reaches the kernels. The same kernels then run over the same number of bytes: measured on a
//! CPU, prompt speed matches the real model's and generation is about 10% faster, in llama.cpp's
//! own bench as in Catena's, so it is for comparing engines on one file (docs/BENCHMARKS.md, "The
//! GPU check"); the answers are noise. Only the header is needed, so [`write_header`] cuts it
//! out of a real file to travel in its place.

use crate::ConvertError;
use catena_gguf::{GgufHeader, TensorInfo};
use half::{bf16, f16};
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

/// Every block scale (and every float weight's bound): small enough that 24 layers of random
/// weights keep activations finite, large enough to be a normal (not subnormal) f16.
const SCALE: f32 = 1e-4;
/// The most a random model may be (a 70B model at 8 bits is about 75 GB).
const MAX_MODEL_BYTES: u64 = 200 << 30;
/// Bytes generated per write.
const CHUNK: usize = 1 << 20;

/// Writes the header of the GGUF file `like` (everything before its tensor data) to `out`.
/// Returns the bytes written.
pub fn write_header(like: &Path, out: &Path) -> Result<u64, ConvertError> {
    let (header, bytes) = read_header(like)?;
    write_atomically(out, |w| w.write_all(&bytes))?;
    Ok(header.data_offset)
}

/// Writes a model with the header of `like` (a whole GGUF file, or its header alone) and
/// random weights chosen by `seed` to `out`. Returns the file's size.
pub fn write_random_weights(like: &Path, out: &Path, seed: u64) -> Result<u64, ConvertError> {
    let (header, bytes) = read_header(like)?;
    let layout = layout(&header, like)?;
    let mut random = SplitMix64(seed);
    write_atomically(out, |w| {
        w.write_all(&bytes)?;
        let mut at = 0;
        for (tensor, fill, len) in &layout {
            write_zeros(w, tensor.offset - at)?;
            fill.write(w, *len, &mut random)?;
            at = tensor.offset + len;
        }
        Ok(())
    })?;
    Ok(header.data_offset + layout.last().map_or(0, |(t, _, len)| t.offset + len))
}

/// The header parsed, and its bytes (up to the data section) as they are in the file.
fn read_header(like: &Path) -> Result<(GgufHeader, Vec<u8>), ConvertError> {
    let header = GgufHeader::read(like).map_err(|e| ConvertError::bad(like, e.to_string()))?;
    if header.data_offset > header.file_len {
        return Err(ConvertError::bad(
            like,
            "the file ends inside its header (a cut download?)",
        ));
    }
    // data_offset is at most the file's length, which was read from the file system.
    let mut bytes = Vec::with_capacity(header.data_offset as usize);
    File::open(like)
        .map_err(ConvertError::io(like))?
        .take(header.data_offset)
        .read_to_end(&mut bytes)
        .map_err(ConvertError::io(like))?;
    Ok((header, bytes))
}

/// The tensors in the order of their data, with how to fill each and its length; refused when
/// a type has no fill here, tensors overlap or the model would be absurdly large.
fn layout(header: &GgufHeader, like: &Path) -> Result<Vec<(TensorInfo, Fill, u64)>, ConvertError> {
    let mut tensors = header.tensors.clone();
    tensors.sort_by_key(|t| t.offset);
    let mut end = 0u64;
    let mut planned = Vec::with_capacity(tensors.len());
    for tensor in tensors {
        let name = catena_gguf::header::ggml_type_name(tensor.ggml_type);
        let fill = Fill::of(tensor.ggml_type).ok_or_else(|| {
            ConvertError::Unsupported(format!(
                "{}: tensor {} is {name}, which random weights are not made for",
                like.display(),
                tensor.name
            ))
        })?;
        let len = tensor
            .data_len()
            .filter(|len| len % fill.unit() == 0)
            .ok_or_else(|| {
                ConvertError::bad(like, format!("tensor {} has a broken shape", tensor.name))
            })?;
        if tensor.offset < end {
            return Err(ConvertError::bad(
                like,
                format!("tensor {} overlaps the one before it", tensor.name),
            ));
        }
        end = tensor.offset.saturating_add(len);
        if header.data_offset.saturating_add(end) > MAX_MODEL_BYTES {
            return Err(ConvertError::OutOfRange {
                path: like.into(),
                field: "the model's size".into(),
                value: format!("over {} bytes", MAX_MODEL_BYTES),
                accepted: format!("at most {MAX_MODEL_BYTES} bytes"),
            });
        }
        planned.push((tensor, fill, len));
    }
    Ok(planned)
}

/// How one tensor type's bytes are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    F32,
    F16,
    Bf16,
    /// Quantised blocks of `bytes` bytes: random bytes, with an f16 scale at each of `scales`
    /// (the byte offsets of the block's `d` and `dmin` in ggml's block structs).
    Blocks {
        bytes: usize,
        scales: &'static [usize],
    },
}

impl Fill {
    fn of(ggml_type: u32) -> Option<Fill> {
        let blocks = |bytes, scales| Some(Fill::Blocks { bytes, scales });
        match ggml_type {
            0 => Some(Fill::F32),
            1 => Some(Fill::F16),
            30 => Some(Fill::Bf16),
            2 => blocks(18, &[0]),       // Q4_0: d, then 16 bytes of nibbles
            3 => blocks(20, &[0, 2]),    // Q4_1: d, m
            6 => blocks(22, &[0]),       // Q5_0: d, high bits, nibbles
            7 => blocks(24, &[0, 2]),    // Q5_1: d, m
            8 => blocks(34, &[0]),       // Q8_0: d, 32 signed bytes
            10 => blocks(84, &[80, 82]), // Q2_K: scales, quants, then d, dmin
            11 => blocks(110, &[108]),   // Q3_K: masks, quants, scales, then d
            12 => blocks(144, &[0, 2]),  // Q4_K: d, dmin, scales, quants
            13 => blocks(176, &[0, 2]),  // Q5_K: d, dmin, scales, high bits, quants
            14 => blocks(210, &[208]),   // Q6_K: low bits, high bits, scales, then d
            _ => None,
        }
    }

    /// The bytes one element or block takes: a tensor's length is a whole number of them.
    fn unit(self) -> u64 {
        match self {
            Fill::F32 => 4,
            Fill::F16 | Fill::Bf16 => 2,
            Fill::Blocks { bytes, .. } => bytes as u64,
        }
    }

    fn write(self, w: &mut impl Write, len: u64, random: &mut SplitMix64) -> std::io::Result<()> {
        let unit = self.unit() as usize;
        let per_chunk = (CHUNK / unit) * unit;
        let mut buf = vec![0u8; per_chunk];
        let mut left = len;
        while left > 0 {
            let n = left.min(per_chunk as u64) as usize;
            let chunk = &mut buf[..n];
            for piece in chunk.chunks_exact_mut(unit) {
                self.fill_unit(piece, random);
            }
            w.write_all(chunk)?;
            left -= n as u64;
        }
        Ok(())
    }

    fn fill_unit(self, piece: &mut [u8], random: &mut SplitMix64) {
        match self {
            Fill::F32 => piece.copy_from_slice(&random.weight().to_le_bytes()),
            Fill::F16 => piece.copy_from_slice(&f16::from_f32(random.weight()).to_le_bytes()),
            Fill::Bf16 => piece.copy_from_slice(&bf16::from_f32(random.weight()).to_le_bytes()),
            Fill::Blocks { scales, .. } => {
                for byte in piece.iter_mut() {
                    *byte = random.next() as u8;
                }
                let scale = f16::from_f32(SCALE).to_le_bytes();
                for &at in scales {
                    piece[at..at + 2].copy_from_slice(&scale);
                }
            }
        }
    }
}

/// Steele, Lea and Flood's SplitMix64: the bytes need only be fixed by the seed and spread
/// over every value, not be statistically strong, so a few lines here rather than a crate.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float weight in [-SCALE·100, SCALE·100).
    fn weight(&mut self) -> f32 {
        let unit = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        (unit * 2.0 - 1.0) * SCALE * 100.0
    }
}

fn write_zeros(w: &mut impl Write, n: u64) -> std::io::Result<()> {
    std::io::copy(&mut std::io::repeat(0).take(n), w).map(|_| ())
}

/// Writes `out` through a `.partial` file renamed into place, so a full disk or a kill leaves
/// no half-written model behind under the name asked for.
fn write_atomically(
    out: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), ConvertError> {
    let mut partial = out.as_os_str().to_owned();
    partial.push(".partial");
    let partial = Path::new(&partial);
    let result = File::create(partial).and_then(|file| {
        let mut w = BufWriter::new(file);
        body(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    });
    match result.and_then(|()| fs::rename(partial, out)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(partial);
            Err(ConvertError::io(out)(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small GGUF: one metadata string, then tensors of the given (name, dims, type).
    fn gguf(tensors: &[(&str, &[u64], u32)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        let string = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u64).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        };
        string(&mut b, "general.architecture");
        b.extend_from_slice(&8u32.to_le_bytes());
        string(&mut b, "qwen2");
        let mut offset = 0u64;
        for (name, dims, ty) in tensors {
            string(&mut b, name);
            b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in *dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&offset.to_le_bytes());
            let info = TensorInfo {
                name: name.to_string(),
                dims: dims.to_vec(),
                ggml_type: *ty,
                offset,
            };
            offset = (offset + info.data_len().unwrap()).div_ceil(32) * 32;
        }
        b.resize(b.len().div_ceil(32) * 32, 0);
        b
    }

    fn scale_of(block: &[u8], at: usize) -> f32 {
        f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
    }

    #[test]
    fn the_header_is_kept_and_every_scale_is_small_and_finite() {
        let dir = tempfile::tempdir().unwrap();
        let header = gguf(&[
            ("norm", &[64], 0),
            ("q4k", &[256, 2], 12),
            ("q6k", &[256], 14),
            ("q8", &[64], 8),
        ]);
        let like = dir.path().join("like.gguf");
        fs::write(&like, &header).unwrap();
        let out = dir.path().join("random.gguf");
        let size = write_random_weights(&like, &out, 7).unwrap();
        let bytes = fs::read(&out).unwrap();
        assert_eq!(bytes.len() as u64, size);
        assert_eq!(
            &bytes[..header.len()],
            &header[..],
            "the header is copied byte for byte"
        );
        let parsed = GgufHeader::read(&out).unwrap();
        parsed.check_data_present().unwrap();
        let data = |name: &str| {
            let t = parsed.tensors.iter().find(|t| t.name == name).unwrap();
            let start = (parsed.data_offset + t.offset) as usize;
            &bytes[start..start + t.data_len().unwrap() as usize]
        };
        assert!(
            data("norm")
                .chunks(4)
                .all(|f| f32::from_le_bytes(f.try_into().unwrap()).abs() <= 0.01)
        );
        for block in data("q4k").chunks(144) {
            assert_eq!(
                (scale_of(block, 0), scale_of(block, 2)),
                (f16::from_f32(SCALE).to_f32(), f16::from_f32(SCALE).to_f32())
            );
        }
        assert_eq!(scale_of(data("q6k"), 208), f16::from_f32(SCALE).to_f32());
        assert_eq!(scale_of(data("q8"), 0), f16::from_f32(SCALE).to_f32());
        assert_ne!(
            data("q4k")[4..144],
            [0u8; 140][..],
            "the quants are random, not zeros"
        );
    }

    #[test]
    fn a_header_alone_makes_the_same_model_and_the_seed_fixes_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let like = dir.path().join("like.gguf");
        fs::write(&like, gguf(&[("a", &[32, 4], 2), ("b", &[8], 1)])).unwrap();
        let full = dir.path().join("full.gguf");
        write_random_weights(&like, &full, 1).unwrap();
        let cut = dir.path().join("header.gguf");
        assert_eq!(
            write_header(&full, &cut).unwrap(),
            fs::metadata(&like).unwrap().len()
        );
        let again = dir.path().join("again.gguf");
        write_random_weights(&cut, &again, 1).unwrap();
        assert_eq!(fs::read(&full).unwrap(), fs::read(&again).unwrap());
        let other = dir.path().join("other.gguf");
        write_random_weights(&cut, &other, 2).unwrap();
        assert_ne!(fs::read(&full).unwrap(), fs::read(&other).unwrap());
    }

    #[test]
    fn a_type_without_a_fill_or_a_cut_header_is_refused_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let like = dir.path().join("like.gguf");
        fs::write(&like, gguf(&[("iq", &[256], 16)])).unwrap();
        let out = dir.path().join("out.gguf");
        let e = write_random_weights(&like, &out, 1).unwrap_err();
        assert!(e.to_string().contains("IQ2_XXS"), "{e}");
        let cut = dir.path().join("cut.gguf");
        fs::write(&cut, &gguf(&[("a", &[32], 0)])[..40]).unwrap();
        assert!(write_random_weights(&cut, &out, 1).is_err());
        assert!(!out.exists());
        assert!(
            fs::read_dir(dir.path()).unwrap().all(|e| !e
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".partial"))
        );
    }
}
