//! Moving the bytes: several ranged connections writing into one `.part` file at their offsets,
//! or one plain stream when the server cannot do ranges. Each connection retries on its own
//! (backoff with jitter, stall detection) from where it stopped; progress is saved to the state
//! file every few MB or every second, after syncing the data it describes.

use super::http::{Failure, describe, parse_content_range, status_failure};
use super::plan::{backoff, jitter_seed};
use super::state::PartState;
use super::{DownloadError, DownloadEvent, DownloadOptions, EventSink};
use parking_lot::Mutex;
use reqwest::header;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One download in flight.
pub(super) struct Transfer {
    pub url: String,
    pub client: reqwest::Client,
    pub file: File,
    pub part_path: PathBuf,
    pub options: DownloadOptions,
    pub events: EventSink,
    pub total: Option<u64>,
    /// Bytes on disk, all segments together.
    pub received: AtomicU64,
    /// Bytes on disk per segment (ranged downloads).
    pub done: Vec<AtomicU64>,
    /// The saved state and where it lives (ranged downloads only).
    pub state: Option<(Mutex<PartState>, PathBuf)>,
    persisted: Mutex<(Instant, u64)>,
    emitted: Mutex<Instant>,
}

impl Transfer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        url: String,
        client: reqwest::Client,
        file: File,
        part_path: PathBuf,
        options: DownloadOptions,
        events: EventSink,
        total: Option<u64>,
        state: Option<(PartState, PathBuf)>,
    ) -> Transfer {
        let (done, received) = match &state {
            Some((s, _)) => (
                s.segments
                    .iter()
                    .map(|seg| AtomicU64::new(seg.done))
                    .collect(),
                s.done(),
            ),
            None => (Vec::new(), 0),
        };
        Transfer {
            url,
            client,
            file,
            part_path,
            options,
            events,
            total,
            received: AtomicU64::new(received),
            done,
            state: state.map(|(s, p)| (Mutex::new(s), p)),
            persisted: Mutex::new((Instant::now(), received)),
            emitted: Mutex::new(Instant::now()),
        }
    }

    fn emit_progress(&self, force: bool) {
        let mut last = self.emitted.lock();
        if force || last.elapsed() >= std::time::Duration::from_millis(100) {
            *last = Instant::now();
            (self.events)(DownloadEvent::Bytes {
                done: self.received.load(Ordering::Relaxed),
                total: self.total,
            });
        }
    }

    /// Saves the state if enough bytes or time went by (or `force`). The data is synced first,
    /// and the per-segment counters are read before the sync, so the saved state never claims
    /// bytes that are not durably in the file.
    pub fn persist(&self, force: bool) {
        let Some((state, path)) = &self.state else {
            return;
        };
        let received = self.received.load(Ordering::Relaxed);
        let mut clock = self.persisted.lock();
        let due = received.saturating_sub(clock.1) >= self.options.persist_every_bytes
            || clock.0.elapsed() >= self.options.persist_every;
        if !(force || due) {
            return;
        }
        let mut state = state.lock();
        for (seg, done) in state.segments.iter_mut().zip(&self.done) {
            seg.done = done.load(Ordering::Acquire);
        }
        let saved = self.file.sync_data().and_then(|()| state.save(path));
        if let Err(e) = saved {
            tracing::warn!(
                "could not save download progress to {}: {e}",
                path.display()
            );
        }
        *clock = (Instant::now(), received);
    }

    fn write(&self, data: &[u8], offset: u64) -> Result<(), Failure> {
        write_all_at(&self.file, data, offset).map_err(|source| {
            Failure::Fatal(DownloadError::Write {
                path: self.part_path.clone(),
                source,
            })
        })
    }

    /// Waits for the next chunk of `response`, or fails after `stall_timeout` without one.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
    ) -> Result<Option<bytes::Bytes>, Failure> {
        let stall = self.options.stall_timeout;
        match tokio::time::timeout(stall, response.chunk()).await {
            Ok(Ok(chunk)) => Ok(chunk),
            Ok(Err(e)) => Err(Failure::Retry(describe(e))),
            Err(_) => Err(Failure::Retry(format!(
                "no data for {:.1} s (stalled)",
                stall.as_secs_f64()
            ))),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, Failure> {
        match tokio::time::timeout(self.options.stall_timeout, request.send()).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(Failure::Retry(describe(e))),
            Err(_) => Err(Failure::Retry(format!(
                "no answer for {:.1} s (stalled)",
                self.options.stall_timeout.as_secs_f64()
            ))),
        }
    }

    /// Waits before retry `attempt`, or gives up with the last cause.
    async fn before_retry(&self, attempt: u32, cause: String) -> Result<(), DownloadError> {
        if attempt > self.options.retries {
            return Err(DownloadError::Exhausted {
                url: self.url.clone(),
                attempts: attempt,
                cause,
            });
        }
        let wait = backoff(
            attempt,
            self.options.backoff_base,
            self.options.backoff_max,
            jitter_seed(),
        );
        (self.events)(DownloadEvent::Retrying {
            attempt,
            max: self.options.retries,
            cause,
            wait_ms: wait.as_millis() as u64,
        });
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Fetches segment `index` to its end, retrying from where it stopped. The failure count
    /// starts again whenever an attempt made progress: a long download over a flaky link goes
    /// on; a dead one stops after `retries` fruitless attempts.
    pub async fn run_segment(
        self: Arc<Self>,
        index: usize,
        start: u64,
        end: u64,
    ) -> Result<(), DownloadError> {
        let mut failures = 0;
        loop {
            let before = self.done[index].load(Ordering::Acquire);
            if start + before >= end {
                return Ok(());
            }
            match self.fetch_range(index, start + before, end).await {
                Ok(()) => continue,
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry(cause)) => {
                    if self.done[index].load(Ordering::Acquire) > before {
                        failures = 0;
                    }
                    failures += 1;
                    self.before_retry(failures, cause).await?;
                }
            }
        }
    }

    async fn fetch_range(&self, index: usize, from: u64, end: u64) -> Result<(), Failure> {
        let request = self
            .client
            .get(&self.url)
            .header(header::RANGE, format!("bytes={from}-{}", end - 1));
        let mut response = self.send(request).await?;
        let status = response.status();
        if status.as_u16() != 206 {
            return Err(if status.is_success() {
                Failure::Retry(format!("the server ignored a range request ({status})"))
            } else {
                status_failure(&self.url, status)
            });
        }
        let range = response
            .headers()
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range);
        if let Some((start, _)) = range
            && start != from
        {
            return Err(Failure::Retry(format!(
                "the server sent bytes from {start}, not {from}"
            )));
        }
        let mut pos = from;
        while pos < end {
            let Some(chunk) = self.next_chunk(&mut response).await? else {
                return Err(Failure::Retry(format!(
                    "the connection closed after {} of {} bytes",
                    pos - from,
                    end - from
                )));
            };
            let take = chunk.len().min((end - pos) as usize);
            self.write(&chunk[..take], pos)?;
            pos += take as u64;
            self.done[index].fetch_add(take as u64, Ordering::Release);
            self.received.fetch_add(take as u64, Ordering::Relaxed);
            self.emit_progress(false);
            self.persist(false);
        }
        Ok(())
    }

    /// The whole file over one plain request, for servers without range support. A failure
    /// means starting again from byte 0 (said as an event); returns the size received.
    pub async fn run_stream(&self) -> Result<u64, DownloadError> {
        let mut failures = 0;
        loop {
            match self.fetch_stream().await {
                Ok(size) => return Ok(size),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry(cause)) => {
                    failures += 1;
                    self.before_retry(failures, cause).await?;
                    let lost = self.received.swap(0, Ordering::Relaxed);
                    if lost > 0 {
                        (self.events)(DownloadEvent::Restarting {
                            reason: format!(
                                "the server cannot resume a download; starting again ({lost} bytes lost)"
                            ),
                        });
                    }
                }
            }
        }
    }

    async fn fetch_stream(&self) -> Result<u64, Failure> {
        self.file.set_len(0).map_err(|source| {
            Failure::Fatal(DownloadError::Write {
                path: self.part_path.clone(),
                source,
            })
        })?;
        self.received.store(0, Ordering::Relaxed);
        let mut response = self.send(self.client.get(&self.url)).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(status_failure(&self.url, status));
        }
        let expected = response.content_length().or(self.total);
        let mut pos = 0u64;
        while let Some(chunk) = self.next_chunk(&mut response).await? {
            self.write(&chunk, pos)?;
            pos += chunk.len() as u64;
            self.received.store(pos, Ordering::Relaxed);
            self.emit_progress(false);
        }
        match expected {
            Some(total) if pos != total => Err(Failure::Retry(format!(
                "the connection closed after {pos} of {total} bytes"
            ))),
            _ => Ok(pos),
        }
    }

    pub fn finish_progress(&self) {
        self.emit_progress(true);
    }
}

/// Writes all of `data` at `offset` without moving a shared cursor, so connections can share one
/// file handle.
#[cfg(unix)]
fn write_all_at(file: &File, data: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, offset)
}

#[cfg(windows)]
fn write_all_at(file: &File, mut data: &[u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !data.is_empty() {
        let n = file.seek_write(data, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}
