//! Small answers read whole (a hub's file listing, a `config.json`), within a deadline for the
//! whole request and a cap on the bytes that actually arrive. A hub is someone else's server: it
//! may send a listing of gigabytes, a "small" file much larger than it listed, or one byte every
//! few seconds, and reqwest's `bytes()` reads whatever comes for as long as it comes. Large files
//! do not come through here: the downloader streams them to disk, checked against their size.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Why an answer was not read whole. The message completes "the answer was ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("not received within {} seconds", .0.as_secs())]
    Timeout(Duration),
    #[error("more than {}", size(*.0))]
    TooLarge(u64),
    #[error("cut off: {0}")]
    Broken(String),
}

/// `bytes` for people: whole MiB when it is some, else bytes.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The moment a whole request (connection, answer, every byte of the body) must be done by.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    within: Duration,
}

impl Deadline {
    /// `within` from now.
    pub fn after(within: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + within,
            within,
        }
    }

    /// Runs `work` (sending a request) until the deadline.
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> Result<T, BodyError> {
        tokio::time::timeout_at(self.at, work)
            .await
            .map_err(|_| BodyError::Timeout(self.within))
    }
}

/// Reads `response`'s body to its end, or fails once `deadline` passes or more than `max_bytes`
/// arrive (at once when the answer announces more). At most `max_bytes` and one chunk are ever
/// held.
pub async fn read_capped(
    mut response: reqwest::Response,
    max_bytes: u64,
    deadline: &Deadline,
) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > max_bytes) {
        return Err(BodyError::TooLarge(max_bytes));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = deadline
        .run(response.chunk())
        .await?
        .map_err(|e| BodyError::Broken(crate::download::describe(e)))?
    {
        if bytes.len() as u64 + chunk.len() as u64 > max_bytes {
            return Err(BodyError::TooLarge(max_bytes));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A loopback server that answers one request with `head` and then `body` in pieces of
    /// `piece` bytes, `pause` apart; returns its URL.
    fn server(head: &'static str, body: Vec<u8>, piece: usize, pause: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(head.as_bytes());
            for part in body.chunks(piece) {
                std::thread::sleep(pause);
                if stream.write_all(part).is_err() {
                    return;
                }
            }
        });
        url
    }

    async fn get(url: &str, max_bytes: u64, within: Duration) -> Result<Vec<u8>, BodyError> {
        let deadline = Deadline::after(within);
        let response = deadline
            .run(reqwest::get(url))
            .await?
            .map_err(|e| BodyError::Broken(e.to_string()))?;
        read_capped(response, max_bytes, &deadline).await
    }

    const CLOSE: &str = "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn the_cap_counts_what_arrives_not_what_was_announced() {
        crate::download::install_tls_provider();
        let long = Duration::from_secs(60);
        let ok = server(CLOSE, b"{}".to_vec(), 1, Duration::ZERO);
        assert_eq!(get(&ok, 2, long).await, Ok(b"{}".to_vec()));
        // No length announced, 8 MiB sent: cut after the first MiB.
        let endless = server(CLOSE, vec![b'a'; 8 << 20], 64 << 10, Duration::ZERO);
        assert_eq!(
            get(&endless, 1 << 20, long).await,
            Err(BodyError::TooLarge(1 << 20))
        );
        // Announced larger than the cap: refused before the body is read.
        let announced = server(
            "HTTP/1.1 200 OK\r\ncontent-length: 999999999\r\n\r\n",
            Vec::new(),
            1,
            Duration::ZERO,
        );
        assert_eq!(
            get(&announced, 1 << 20, long).await,
            Err(BodyError::TooLarge(1 << 20))
        );
        assert_eq!(BodyError::TooLarge(4 << 20).to_string(), "more than 4 MiB");
    }

    #[tokio::test]
    async fn the_deadline_covers_the_whole_body() {
        crate::download::install_tls_provider();
        // One byte every 100 ms for a minute: each read is quick, all of them are not.
        let within = Duration::from_millis(500);
        let slow = server(CLOSE, vec![b'a'; 600], 1, Duration::from_millis(100));
        let started = std::time::Instant::now();
        assert_eq!(
            get(&slow, 1 << 20, within).await,
            Err(BodyError::Timeout(within))
        );
        // Generous: a loaded machine is slow, and the body would take a minute.
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
