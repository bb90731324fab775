//! The destination: an in-process HTTP server that records every delivery attempt it sees,
//! and answers 200, or (while the fault injector says so) 500, or stalls past the
//! destination's timeout before answering.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok = 0,
    Fail500 = 1,
    Stall = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    Ok,
    Fail500,
    /// Held past the destination timeout; the worker gave up on it.
    Stalled,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub webhook_id: Option<String>,
    pub provider_event_id: Option<String>,
    pub attempt: Option<u32>,
    pub answered: Answered,
    pub signature_ok: bool,
    pub body: Bytes,
    pub at_secs: f64,
}

pub struct SinkState {
    mode: AtomicU8,
    stall: Duration,
    key: Vec<u8>,
    started_at: Instant,
    deliveries: Mutex<Vec<Delivery>>,
    pub requests: AtomicU64,
    /// Sabotage for testing the checker: answer 200 but record nothing, every Nth time.
    forget_every: u64,
    oks: AtomicU64,
}

impl SinkState {
    pub fn set_mode(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            1 => Mode::Fail500,
            2 => Mode::Stall,
            _ => Mode::Ok,
        }
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }
}

pub struct Sink {
    pub base: String,
    pub state: Arc<SinkState>,
    handle: ServerHandle,
}

impl Sink {
    /// `signing_secret` is the destination's `whsec_` secret, to check every signature.
    pub async fn start(
        signing_secret: &str,
        stall: Duration,
        started_at: Instant,
        forget_every: u64,
    ) -> anyhow::Result<Sink> {
        let key = base64::engine::general_purpose::STANDARD
            .decode(signing_secret.trim_start_matches("whsec_"))?;
        let state = Arc::new(SinkState {
            mode: AtomicU8::new(Mode::Ok as u8),
            stall,
            key,
            started_at,
            deliveries: Mutex::default(),
            requests: AtomicU64::new(0),
            forget_every,
            oks: AtomicU64::new(0),
        });
        let data = web::Data::from(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(4 << 20))
                .default_service(web::to(record))
        })
        .workers(2)
        .max_connections(4096)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Sink {
            base,
            state,
            handle,
        })
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Standard Webhooks: `v1,<base64 HMAC-SHA256("{id}.{ts}.{body}")>`, any of a space list.
fn signature_ok(
    key: &[u8],
    id: Option<&str>,
    ts: Option<&str>,
    sig: Option<&str>,
    body: &[u8],
) -> bool {
    let (Some(id), Some(ts), Some(sig)) = (id, ts, sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    sig.split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}

async fn record(state: web::Data<SinkState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    state.requests.fetch_add(1, Ordering::Relaxed);
    let mode = state.mode();
    let webhook_id = header(&req, "webhook-id");
    let sig_ok = signature_ok(
        &state.key,
        webhook_id.as_deref(),
        header(&req, "webhook-timestamp").as_deref(),
        header(&req, "webhook-signature").as_deref(),
        &body,
    );
    let answered = match mode {
        Mode::Ok => Answered::Ok,
        Mode::Fail500 => Answered::Fail500,
        Mode::Stall => Answered::Stalled,
    };
    if answered == Answered::Ok
        && state.forget_every > 0
        && (state.oks.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(state.forget_every)
    {
        return HttpResponse::Ok().body("ok");
    }
    state.deliveries.lock().unwrap().push(Delivery {
        path: req.path().to_owned(),
        webhook_id,
        provider_event_id: header(&req, "hookgate-provider-event-id"),
        attempt: header(&req, "hookgate-attempt").and_then(|a| a.parse().ok()),
        answered,
        signature_ok: sig_ok,
        body,
        at_secs: state.started_at.elapsed().as_secs_f64(),
    });
    match mode {
        Mode::Ok => HttpResponse::Ok().body("ok"),
        Mode::Fail500 => HttpResponse::InternalServerError().body("chaos: sink failing"),
        Mode::Stall => {
            // Longer than the destination timeout: the worker gives up and retries. If the
            // worker is gone by then, actix drops this future and nothing is answered.
            tokio::time::sleep(state.stall).await;
            HttpResponse::ServiceUnavailable().body("chaos: sink stalled")
        }
    }
}
