//! A guest's stdout or stderr, capped: the first and last bytes are kept and the middle is
//! counted, so a program that prints 100 MB costs 128 KiB of memory and its observation still
//! shows how the output began and ended.

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

#[derive(Debug)]
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    fn write(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }
}

/// What a stream held when the program ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// The first bytes.
    pub head: Vec<u8>,
    /// The last bytes, after the gap (empty when nothing was dropped and all fit in `head`).
    pub tail: Vec<u8>,
    /// Bytes written in all.
    pub total: u64,
}

impl CapturedOutput {
    /// Bytes written but not kept.
    pub fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The output as text (invalid UTF-8 replaced), with a one-line note where bytes were dropped.
    pub fn to_text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        let dropped = self.dropped();
        if dropped > 0 {
            text.push_str(&format!("\n[... {dropped} bytes of output omitted ...]\n"));
        }
        text.push_str(&String::from_utf8_lossy(&self.tail));
        text
    }
}

/// A capped pipe; clones share the same capture.
#[derive(Debug, Clone)]
pub struct CappedPipe {
    capture: Arc<Mutex<Capture>>,
}

impl CappedPipe {
    /// Keeps up to `keep` bytes: half from the start, half from the end.
    pub fn new(keep: usize) -> Self {
        let head_cap = keep.div_ceil(2);
        CappedPipe {
            capture: Arc::new(Mutex::new(Capture {
                head: Vec::new(),
                tail: VecDeque::new(),
                head_cap,
                tail_cap: keep - head_cap,
                total: 0,
            })),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Capture) -> R) -> R {
        let mut guard = self.capture.lock();
        f(&mut guard)
    }

    /// What was captured since the last `take`; the pipe starts over empty.
    pub fn take(&self) -> CapturedOutput {
        self.with(|c| CapturedOutput {
            head: std::mem::take(&mut c.head),
            tail: c.tail.drain(..).collect(),
            total: std::mem::take(&mut c.total),
        })
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.with(|c| c.write(&bytes));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always ready; the cap drops bytes instead of blocking the guest.
        Ok(1 << 20)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.with(|c| c.write(buf));
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_all(pipe: &CappedPipe, pieces: &[&[u8]]) -> CapturedOutput {
        for p in pieces {
            pipe.with(|c| c.write(p));
        }
        pipe.take()
    }

    #[test]
    fn small_output_is_kept_whole() {
        let out = write_all(&CappedPipe::new(16), &[b"hello ", b"world"]);
        assert_eq!(out.to_text(), "hello world");
        assert_eq!(out.dropped(), 0);
    }

    #[test]
    fn large_output_keeps_head_and_tail() {
        let data: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let pipe = CappedPipe::new(20);
        for chunk in data.chunks(7) {
            pipe.with(|c| c.write(chunk));
        }
        let out = pipe.take();
        assert_eq!(out.head, &data[..10]);
        assert_eq!(out.tail, &data[990..]);
        assert_eq!(out.total, 1000);
        assert_eq!(out.dropped(), 980);
        assert!(
            out.to_text()
                .contains("[... 980 bytes of output omitted ...]")
        );
    }

    #[test]
    fn one_huge_write() {
        let big = vec![b'x'; 1 << 20];
        let out = write_all(&CappedPipe::new(8), &[b"ab", &big, b"yz"]);
        assert_eq!(out.head, b"abxx");
        assert_eq!(out.tail, b"xxyz");
        assert_eq!(out.total, (1 << 20) + 4);
    }
}
