//! The destination for benchmarks: a raw tokio HTTP/1.1 server (keep-alive) that notes each
//! delivery's `webhook-id`, attempt and arrival instant and answers at once: 200, or 500 for a
//! deterministic one in `fail_one_in` first attempts (by a hash of the `webhook-id`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};

use crate::http1::{parse_headers, ReadBuf};

#[derive(Debug, Clone)]
pub struct Receipt {
    pub webhook_id: String,
    pub attempt: u32,
    pub at: Instant,
    pub status: u16,
}

#[derive(Default)]
pub struct SinkState {
    pub receipts: Mutex<Vec<Receipt>>,
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    /// 0: never fail.
    fail_one_in: AtomicU64,
}

impl SinkState {
    pub fn set_fail_one_in(&self, n: u64) {
        self.fail_one_in.store(n, Ordering::Relaxed);
    }

    pub fn take_receipts(&self) -> Vec<Receipt> {
        std::mem::take(&mut *self.receipts.lock().expect("receipts"))
    }

    pub fn reset(&self) {
        self.take_receipts();
        self.ok.store(0, Ordering::Relaxed);
        self.failed.store(0, Ordering::Relaxed);
    }
}

pub struct Sink {
    pub addr: SocketAddr,
    pub state: Arc<SinkState>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    pub async fn start(listen: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(SinkState::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, st.clone()));
            }
        });
        Ok(Self { addr, state, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// FNV-1a: a stable hash, so the same events fail in every run.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

async fn serve(mut stream: TcpStream, state: Arc<SinkState>) {
    let mut rb = ReadBuf::default();
    loop {
        let head = match rb.read_head(&mut stream).await {
            Ok(Some(h)) => h,
            _ => return,
        };
        let (mut id, mut attempt) = (String::new(), 0u32);
        let framing = parse_headers(&head, |name, value| match name {
            "webhook-id" => id = value.to_owned(),
            "hookgate-attempt" => attempt = value.parse().unwrap_or(0),
            _ => {}
        });
        let read = if framing.chunked {
            rb.read_chunked(&mut stream, None).await
        } else {
            rb.read_exact(&mut stream, framing.content_length.unwrap_or(0), None)
                .await
        };
        if read.is_err() {
            return;
        }
        let at = Instant::now();
        let n = state.fail_one_in.load(Ordering::Relaxed);
        let fail = n > 0 && attempt == 1 && fnv1a(id.as_bytes()).is_multiple_of(n);
        let answer: &[u8] = if fail {
            state.failed.fetch_add(1, Ordering::Relaxed);
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
        } else {
            state.ok.fetch_add(1, Ordering::Relaxed);
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
        };
        if stream.write_all(answer).await.is_err() {
            return;
        }
        state.receipts.lock().expect("receipts").push(Receipt {
            webhook_id: id,
            attempt,
            at,
            status: if fail { 500 } else { 200 },
        });
        if framing.close {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_and_records_and_fails_first_attempts_by_hash() {
        let sink = Sink::start("127.0.0.1:0").await.unwrap();
        sink.state.set_fail_one_in(2);
        let mut conn = crate::http1::Conn::connect(sink.addr).await.unwrap();
        let mut statuses = Vec::new();
        for (id, attempt) in [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2)] {
            let req = format!(
                "POST /hook HTTP/1.1\r\nHost: x\r\nwebhook-id: {id}\r\nhookgate-attempt: {attempt}\r\nContent-Length: 2\r\n\r\n{{}}"
            );
            statuses.push(conn.round_trip(req.as_bytes(), false).await.unwrap().status);
        }
        let expect: Vec<u16> = ["a", "b", "c"]
            .iter()
            .map(|id| {
                if fnv1a(id.as_bytes()).is_multiple_of(2) {
                    500
                } else {
                    200
                }
            })
            .chain([200, 200])
            .collect();
        assert_eq!(statuses, expect);
        assert_eq!(sink.state.take_receipts().len(), 5);
    }
}
