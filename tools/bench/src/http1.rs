//! A minimal HTTP/1.1 client connection over a tokio `TcpStream`, with keep-alive: write a
//! request, read the status line, the headers and a `Content-Length` (or chunked) body.
//! Lean on purpose: on a 2-core machine the load generator shares the CPU with the gateway
//! and the database, so it must cost as little as possible per request.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A read buffer that keeps unconsumed bytes between messages.
#[derive(Debug, Default)]
pub struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
}

impl ReadBuf {
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more bytes; `Ok(false)` when the peer closed the connection.
    async fn fill(&mut self, stream: &mut TcpStream) -> io::Result<bool> {
        if self.start > 0 && self.start > self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + 8192, 0);
        let n = stream.read(&mut self.buf[len..]).await?;
        self.buf.truncate(len + n);
        Ok(n > 0)
    }

    /// Reads until a full message head (up to and including the blank line) is buffered,
    /// then returns it as an owned string and consumes it. `Ok(None)`: closed before any byte.
    pub async fn read_head(&mut self, stream: &mut TcpStream) -> io::Result<Option<String>> {
        loop {
            if let Some(end) = find(self.pending(), b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.pending()[..end]).into_owned();
                self.consume(end + 4);
                return Ok(Some(head));
            }
            if self.pending().len() > 64 * 1024 {
                return Err(invalid("message head over 64 KiB"));
            }
            if !self.fill(stream).await? {
                return if self.pending().is_empty() {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
        }
    }

    /// Reads exactly `n` body bytes, appending them to `out` when given.
    pub async fn read_exact(
        &mut self,
        stream: &mut TcpStream,
        mut n: usize,
        mut out: Option<&mut Vec<u8>>,
    ) -> io::Result<()> {
        while n > 0 {
            if self.pending().is_empty() && !self.fill(stream).await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = n.min(self.pending().len());
            if let Some(out) = out.as_deref_mut() {
                out.extend_from_slice(&self.pending()[..take]);
            }
            self.consume(take);
            n -= take;
        }
        Ok(())
    }

    async fn read_line(&mut self, stream: &mut TcpStream) -> io::Result<String> {
        loop {
            if let Some(end) = find(self.pending(), b"\r\n") {
                let line = String::from_utf8_lossy(&self.pending()[..end]).into_owned();
                self.consume(end + 2);
                return Ok(line);
            }
            if !self.fill(stream).await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Reads a chunked body (trailers ignored).
    pub async fn read_chunked(
        &mut self,
        stream: &mut TcpStream,
        mut out: Option<&mut Vec<u8>>,
    ) -> io::Result<()> {
        loop {
            let line = self.read_line(stream).await?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                while !self.read_line(stream).await?.is_empty() {}
                return Ok(());
            }
            self.read_exact(stream, size, out.as_deref_mut()).await?;
            self.read_line(stream).await?;
        }
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// The framing facts of a message head.
#[derive(Debug, Default)]
pub struct Head {
    pub content_length: Option<usize>,
    pub chunked: bool,
    pub close: bool,
}

/// Calls `each(name_lowercase, value)` for every header line of `head` (after line one) and
/// returns the framing facts.
pub fn parse_headers(head: &str, mut each: impl FnMut(&str, &str)) -> Head {
    let mut h = Head::default();
    for line in head.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        match name.as_str() {
            "content-length" => h.content_length = value.parse().ok(),
            "transfer-encoding" => h.chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => h.close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
        each(&name, value);
    }
    h
}

/// An answer: the status and, when asked for, the body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One keep-alive client connection.
pub struct Conn {
    stream: TcpStream,
    rb: ReadBuf,
    /// The server said `Connection: close`: reconnect before the next request.
    pub closed: bool,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            rb: ReadBuf::default(),
            closed: false,
        })
    }

    /// Sends one complete request (head and body already serialised) and reads the answer.
    pub async fn round_trip(&mut self, request: &[u8], keep_body: bool) -> io::Result<Response> {
        self.stream.write_all(request).await?;
        let head = self
            .rb
            .read_head(&mut self.stream)
            .await?
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| invalid("bad status line"))?;
        let framing = parse_headers(&head, |_, _| {});
        let mut body = Vec::new();
        let out = keep_body.then_some(&mut body);
        if framing.chunked {
            self.rb.read_chunked(&mut self.stream, out).await?;
        } else if let Some(n) = framing.content_length {
            self.rb.read_exact(&mut self.stream, n, out).await?;
        }
        self.closed = framing.close;
        Ok(Response { status, body })
    }
}
