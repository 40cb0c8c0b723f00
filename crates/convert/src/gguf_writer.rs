//! Writing a GGUF file (version 3): the metadata, the tensor table, then the tensor data, each
//! piece aligned to 32 bytes as llama.cpp's loader expects (`general.alignment` is left at its
//! default). The header is written from a plan, before any weight is read, so tensors can be
//! streamed in one at a time. (candle's `gguf_file::write`, which the trainer uses for adapters of
//! a few megabytes, takes every tensor in memory at once: a 7B model's 15 GB of F16 would not fit.)

use std::io::{self, Write};

/// The alignment of the data section and of every tensor in it.
pub const ALIGNMENT: u64 = 32;

/// A metadata value, with the GGUF type llama.cpp reads for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    I32Array(Vec<i32>),
}

/// Tensor element types this converter writes (ggml's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
}

impl GgmlType {
    pub fn element_size(self) -> u64 {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 => 2,
        }
    }
}

/// One tensor as the table lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorPlan {
    pub name: String,
    /// ggml's order: the fastest-moving dimension first (the reverse of a row-major shape).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

impl TensorPlan {
    pub fn bytes(&self) -> u64 {
        self.dims.iter().product::<u64>() * self.ggml_type.element_size()
    }
}

/// Rounds `n` up to the alignment.
pub fn aligned(n: u64) -> u64 {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

// GGUF metadata value types.
const TYPE_U32: u32 = 4;
const TYPE_I32: u32 = 5;
const TYPE_F32: u32 = 6;
const TYPE_BOOL: u32 = 7;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;

fn put_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn put_value(w: &mut impl Write, value: &Value) -> io::Result<()> {
    match value {
        Value::U32(v) => {
            w.write_all(&TYPE_U32.to_le_bytes())?;
            w.write_all(&v.to_le_bytes())
        }
        Value::I32(v) => {
            w.write_all(&TYPE_I32.to_le_bytes())?;
            w.write_all(&v.to_le_bytes())
        }
        Value::F32(v) => {
            w.write_all(&TYPE_F32.to_le_bytes())?;
            w.write_all(&v.to_le_bytes())
        }
        Value::Bool(v) => {
            w.write_all(&TYPE_BOOL.to_le_bytes())?;
            w.write_all(&[u8::from(*v)])
        }
        Value::Str(s) => {
            w.write_all(&TYPE_STRING.to_le_bytes())?;
            put_str(w, s)
        }
        Value::StrArray(items) => {
            w.write_all(&TYPE_ARRAY.to_le_bytes())?;
            w.write_all(&TYPE_STRING.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|s| put_str(w, s))
        }
        Value::I32Array(items) => {
            w.write_all(&TYPE_ARRAY.to_le_bytes())?;
            w.write_all(&TYPE_I32.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
        }
    }
}

/// Writes the header (magic, version, counts, metadata, tensor table) and the padding up to the
/// data section. Returns the number of bytes written. The tensors' data must follow in the same
/// order, each padded to [`ALIGNMENT`] ([`write_padding`]).
pub fn write_header(
    w: &mut impl Write,
    metadata: &[(String, Value)],
    tensors: &[TensorPlan],
) -> io::Result<u64> {
    let mut counted = Counting { inner: w, count: 0 };
    let w = &mut counted;
    w.write_all(b"GGUF")?;
    w.write_all(&3u32.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (key, value) in metadata {
        put_str(w, key)?;
        put_value(w, value)?;
    }
    let mut offset = 0u64;
    for tensor in tensors {
        put_str(w, &tensor.name)?;
        w.write_all(&(tensor.dims.len() as u32).to_le_bytes())?;
        for d in &tensor.dims {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&(tensor.ggml_type as u32).to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        offset = aligned(offset + tensor.bytes());
    }
    let header = w.count;
    write_padding(w, header)?;
    Ok(w.count)
}

/// Zero bytes from `written` up to the next multiple of [`ALIGNMENT`].
pub fn write_padding(w: &mut impl Write, written: u64) -> io::Result<()> {
    let pad = aligned(written) - written;
    w.write_all(&[0u8; ALIGNMENT as usize][..pad as usize])
}

/// The size of the whole file for `header_len` bytes of header and `tensors`.
pub fn file_size(header_len: u64, tensors: &[TensorPlan]) -> u64 {
    header_len + tensors.iter().map(|t| aligned(t.bytes())).sum::<u64>()
}

/// A writer that counts the bytes that pass through it.
pub struct Counting<W: Write> {
    pub inner: W,
    pub count: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena_gguf::{GgufHeader, MetaValue};

    #[test]
    fn what_is_written_reads_back_with_the_gguf_reader() {
        let metadata = vec![
            (
                "general.architecture".to_string(),
                Value::Str("qwen2".into()),
            ),
            ("qwen2.block_count".to_string(), Value::U32(2)),
            ("qwen2.rope.freq_base".to_string(), Value::F32(1e6)),
            (
                "tokenizer.ggml.add_bos_token".to_string(),
                Value::Bool(false),
            ),
            (
                "tokenizer.ggml.tokens".to_string(),
                Value::StrArray(vec!["a".into(), "b".into(), "Ġc".into()]),
            ),
            (
                "tokenizer.ggml.token_type".to_string(),
                Value::I32Array(vec![1, 1, 3]),
            ),
        ];
        let tensors = vec![
            TensorPlan {
                name: "token_embd.weight".into(),
                dims: vec![4, 3],
                ggml_type: GgmlType::F16,
            },
            TensorPlan {
                name: "output_norm.weight".into(),
                dims: vec![3],
                ggml_type: GgmlType::F32,
            },
        ];
        let mut file = Vec::new();
        let header = write_header(&mut file, &metadata, &tensors).unwrap();
        assert_eq!(header % ALIGNMENT, 0);
        assert_eq!(file.len() as u64, header);
        for t in &tensors {
            let data = vec![7u8; t.bytes() as usize];
            file.extend_from_slice(&data);
            write_padding(&mut file, t.bytes()).unwrap();
        }
        assert_eq!(file.len() as u64, file_size(header, &tensors));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, &file).unwrap();
        let read = GgufHeader::read(&path).unwrap();
        assert_eq!(read.architecture(), Some("qwen2"));
        assert_eq!(read.get_u64("qwen2.block_count"), Some(2));
        assert!(matches!(
            read.metadata.get("tokenizer.ggml.add_bos_token"),
            Some(MetaValue::Bool(false))
        ));
        assert_eq!(read.tensors.len(), 2);
        assert_eq!(read.tensors[0].name, "token_embd.weight");
        assert_eq!(read.tensors[0].dims, vec![4, 3]);
        assert_eq!(read.tensors[1].offset, 32);
        assert_eq!(read.data_offset, header);
        read.check_data_present().unwrap();
    }
}
