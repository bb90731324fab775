//! A local destination that records every delivery and answers as a test scripts it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }
}

/// One scripted answer: status, optional Retry-After, optional delay before answering.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub delay: Option<Duration>,
}

impl Answer {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
            delay: None,
        }
    }
}

#[derive(Default)]
struct State {
    received: Mutex<Vec<Received>>,
    /// Per path: answers to give in order; after them, `always` or 200.
    script: Mutex<HashMap<String, VecDeque<Answer>>>,
    always: Mutex<HashMap<String, Answer>>,
    /// Woken at every request received, for `wait_for`.
    arrived: tokio::sync::Notify,
}

pub struct Sink {
    pub base: String,
    state: Arc<State>,
    handle: ServerHandle,
}

impl Sink {
    pub async fn start() -> Sink {
        let state = Arc::new(State::default());
        let data = web::Data::from(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(record))
        })
        .workers(2)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Sink {
            base,
            state,
            handle,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn script(&self, path: &str, answers: &[Answer]) {
        self.state
            .script
            .lock()
            .unwrap()
            .entry(path.to_owned())
            .or_default()
            .extend(answers.iter().copied());
    }

    pub fn always(&self, path: &str, answer: Answer) {
        self.state
            .always
            .lock()
            .unwrap()
            .insert(path.to_owned(), answer);
    }

    pub fn received(&self, path: &str) -> Vec<Received> {
        self.state
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Waits (bounded) until `path` has received `n` requests; returns what it has received
    /// by then. Woken by each request's arrival, not by polling.
    pub async fn wait_for(&self, path: &str, n: usize, limit: Duration) -> Vec<Received> {
        self.wait_until(path, |got| got.len() >= n, limit).await
    }

    /// Waits (bounded) until what `path` has received satisfies `done`; returns it by then.
    /// Woken by each request's arrival, not by polling.
    pub async fn wait_until(
        &self,
        path: &str,
        done: impl Fn(&[Received]) -> bool,
        limit: Duration,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the requests are read, so an arrival in between still wakes it.
            let arrival = self.state.arrived.notified();
            tokio::pin!(arrival);
            arrival.as_mut().enable();
            let got = self.received(path);
            if done(&got) {
                return got;
            }
            if tokio::time::timeout_at(deadline, arrival).await.is_err() {
                return self.received(path);
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        super::stop_server(self.handle.clone());
    }
}

async fn record(state: web::Data<State>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let path = req.path().to_owned();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    state.received.lock().unwrap().push(Received {
        path: path.clone(),
        headers,
        body: body.to_vec(),
        at: std::time::Instant::now(),
    });
    state.arrived.notify_waiters();
    let scripted = state
        .script
        .lock()
        .unwrap()
        .get_mut(&path)
        .and_then(VecDeque::pop_front);
    let answer = scripted
        .or_else(|| state.always.lock().unwrap().get(&path).copied())
        .unwrap_or(Answer::status(200));
    if let Some(delay) = answer.delay {
        tokio::time::sleep(delay).await;
    }
    let mut response =
        HttpResponse::build(actix_web::http::StatusCode::from_u16(answer.status).unwrap());
    if let Some(secs) = answer.retry_after {
        response.insert_header(("Retry-After", secs.to_string()));
    }
    if (300..400).contains(&answer.status) {
        response.insert_header(("Location", "/elsewhere"));
    }
    response.body("sink says hi")
}
