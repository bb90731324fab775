//! The gateway's hold on each client connection. A kept-alive connection's next request
//! head must arrive within `server.request_timeout` of the previous answer, or the
//! connection is answered 408 and closed; and a request whose body was abandoned (too large,
//! too slow, broken) ends its connection instead of leaving actix draining the rest.
//!
//! actix arms its head timer for a connection's first request only, and clears its
//! keep-alive timer at the first byte of the next request, so a client could send one quick
//! request and then drip the next head forever, holding a socket. Each connection gets a
//! `Connection` (`on_connect`); the edge middleware marks when a request starts and when its
//! answer is ready; a task started at the first answer closes the connection when it has
//! been between requests for longer than the timeout. It closes through a duplicate of the
//! socket's descriptor: `shutdown` acts on the socket, so actix's reads then end.
//!
//! An abandoned body is answered the same way, on the socket itself before the handler
//! returns, then the connection is shut: actix would otherwise read the rest of the body
//! after its own answer and serve the next request on the connection, `Connection: close`
//! or not.

use std::io::Write as _;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

const TIMEOUT_BODY: &str =
    r#"{"error":{"code":"request_timeout","message":"the request head did not arrive in time"}}"#;

/// A complete HTTP/1.1 answer with a JSON body, ending the connection.
fn raw_answer(status: actix_web::http::StatusCode, body: &str) -> String {
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
}

#[derive(Debug)]
struct State {
    busy: bool,
    idle_since: Instant,
    closed: bool,
    watching: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Notify,
    socket: TcpStream,
    timeout: Duration,
}

/// Kept in the connection's data; dropped when the connection closes.
#[derive(Debug)]
pub struct Connection(Arc<Shared>);

impl Connection {
    /// Answers on the socket itself and shuts the connection, for a request whose body the
    /// handler stopped reading. Called before the handler returns, so nothing of actix's is
    /// on the wire yet; its own answer then meets a closed socket and the connection ends.
    pub fn answer_and_close(&self, status: actix_web::http::StatusCode, body: &str) {
        self.0.answer_and_close(status, body);
    }
}

impl Connection {
    /// For a new connection (`HttpServer::on_connect`); `None` for anything but TCP.
    pub fn watch(connection: &dyn std::any::Any, timeout: Duration) -> Option<Self> {
        let tcp = connection.downcast_ref::<tokio::net::TcpStream>()?;
        let socket = TcpStream::from(tcp.as_fd().try_clone_to_owned().ok()?);
        Some(Self(Arc::new(Shared {
            state: Mutex::new(State {
                busy: false,
                idle_since: Instant::now(),
                closed: false,
                watching: false,
            }),
            changed: Notify::new(),
            socket,
            timeout,
        })))
    }

    /// A request's head has arrived.
    pub fn started(&self) {
        self.0.state.lock().expect("connection state").busy = true;
    }

    /// The request's answer is ready: the next head is due within the timeout.
    pub fn answered(&self) {
        let start = {
            let mut s = self.0.state.lock().expect("connection state");
            s.busy = false;
            s.idle_since = Instant::now();
            !std::mem::replace(&mut s.watching, true)
        };
        if start {
            tokio::spawn(watch(self.0.clone()));
        } else {
            self.0.changed.notify_one();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.state.lock().expect("connection state").closed = true;
        self.0.changed.notify_one();
    }
}

impl Shared {
    fn answer_and_close(&self, status: actix_web::http::StatusCode, body: &str) {
        // Best effort: the client may not read; closing is what matters.
        let _ = (&self.socket).write(raw_answer(status, body).as_bytes());
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

async fn watch(shared: Arc<Shared>) {
    loop {
        let (busy, idle_since, closed) = {
            let s = shared.state.lock().expect("connection state");
            (s.busy, s.idle_since, s.closed)
        };
        if closed {
            return;
        }
        if busy {
            shared.changed.notified().await;
            continue;
        }
        let deadline = idle_since + shared.timeout;
        if Instant::now() >= deadline {
            shared.answer_and_close(actix_web::http::StatusCode::REQUEST_TIMEOUT, TIMEOUT_BODY);
            tracing::debug!("a kept-alive connection's next request head was too slow; closed");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shared.changed.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_timeout_answer_declares_its_length() {
        let text = super::raw_answer(
            actix_web::http::StatusCode::REQUEST_TIMEOUT,
            super::TIMEOUT_BODY,
        );
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }
}
