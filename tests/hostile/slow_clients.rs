//! Slow clients: request heads, bodies and chunked bodies that drip or stall.

use tokio::sync::oneshot;

use crate::common::*;

both_backends!(
    slowloris_request_head_is_cut_off_by_the_request_timeout,
    slow_second_request_head_on_a_kept_alive_connection,
    slow_body_after_a_complete_head,
    slow_chunked_body_is_answered_and_closed,
);

async fn slowloris_app(backend: Backend) -> TestApp {
    spawn_with(backend, |s| s.server.request_timeout = "1s".into()).await
}

/// Sends `prefix`, then one byte (`X`) every 200 ms, until the server closes or `give_up`
/// passes; `first_drip` is told once the first of those bytes is out (the slow client is then
/// mid-request). Returns (time from the first byte to the close, bytes the server sent).
async fn drip(
    stream: &mut TcpStream,
    prefix: &[u8],
    give_up: Duration,
    first_drip: oneshot::Sender<()>,
) -> (Option<Duration>, Vec<u8>) {
    let mut first_drip = Some(first_drip);
    let started = Instant::now();
    stream.write_all(prefix).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < give_up {
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (Some(started.elapsed()), got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {
                if stream.write_all(b"X").await.is_err() {
                    return (Some(started.elapsed()), got);
                }
                if let Some(tx) = first_drip.take() {
                    let _ = tx.send(());
                }
            }
        }
    }
    (None, got)
}

async fn a_normal_request_works(app: &TestApp, id: &str) {
    let body = stripe_body(id);
    let r = app
        .post_webhook("stripe", &stripe_signed(&body), body)
        .await;
    assert_eq!(r.status(), 200);
}

async fn slowloris_request_head_is_cut_off_by_the_request_timeout(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut slow = TcpStream::connect(socket_addr(&app)).await.unwrap();
    let (first_drip, dripping_now) = oneshot::channel();
    let dripping = tokio::spawn(async move {
        drip(
            &mut slow,
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            Duration::from_secs(8),
            first_drip,
        )
        .await
    });
    // Meanwhile (once the slow client is mid-request) the gateway serves everyone else.
    let _ = dripping_now.await;
    a_normal_request_works(&app, "evt_during_slowloris").await;

    let (closed_after, answer) = dripping.await.unwrap();
    let closed_after = closed_after.expect("the slow client was never cut off");
    // request_timeout is 1 s; allow scheduling slack.
    assert!(
        closed_after >= Duration::from_millis(900),
        "{closed_after:?}"
    );
    assert!(closed_after < Duration::from_secs(3), "{closed_after:?}");
    let answer = RawResponse::parse(&answer, true).expect("an HTTP answer before the close");
    assert_eq!(answer.status, 408);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

async fn slow_second_request_head_on_a_kept_alive_connection(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    // A complete first request, kept alive, answered.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Then the second request's head, one byte at a time.
    let (first_drip, dripping_now) = oneshot::channel();
    let dripping = tokio::spawn(async move {
        drip(
            &mut stream,
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            Duration::from_millis(6500),
            first_drip,
        )
        .await
    });
    let _ = dripping_now.await; // the slow client is mid-request
    a_normal_request_works(&app, "evt_during_slow_second_head").await;
    let (closed_after, answer) = dripping.await.unwrap();
    // actix arms its head timer for a connection's first request only; the gateway's own
    // watch (src/http/connection.rs) gives every later head `server.request_timeout` (1 s
    // here) from the previous answer, then answers 408 and closes.
    let closed_after = closed_after.expect("the slow second head was never cut off");
    assert!(closed_after < Duration::from_secs(4), "{closed_after:?}");
    let answer = RawResponse::parse(&answer, true).unwrap_or_else(|| {
        panic!(
            "no HTTP answer before the close: {:?}",
            String::from_utf8_lossy(&answer)
        )
    });
    assert_eq!(answer.error_code(), (408, "request_timeout".into()));
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

/// A chunked body that stops arriving: answered 408, and the connection is closed, not kept
/// for whatever the client sends next. Each client here finishes its body after the 408 and
/// sends a second request on the same connection: none is answered, so stalled bodies can
/// neither pile up open sockets nor reuse them.
async fn slow_chunked_body_is_answered_and_closed(backend: Backend) {
    let app = slowloris_app(backend).await;
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
        stream
            .write_all(
                b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"id\"\r\n",
            )
            .await
            .unwrap();
        streams.push(stream);
    }
    for mut stream in streams {
        // The 408, as soon as it is complete.
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let answered = tokio::time::timeout(Duration::from_secs(8), async {
            while RawResponse::parse(&buf, false).is_none() {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        assert!(answered.is_ok(), "no answer to the stalled body");
        let r = RawResponse::parse(&buf, true).expect("an answer to the stalled body");
        assert_eq!(r.error_code(), (408, "request_timeout".into()));
        // The rest of the body, then a second request on the same connection.
        let _ = stream
            .write_all(b"0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(8), async {
            loop {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => rest.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the connection was kept open");
        let after = &buf[buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
        let mut later = after[r.body.len()..].to_vec();
        later.extend_from_slice(&rest);
        assert!(
            !String::from_utf8_lossy(&later).contains("HTTP/1.1"),
            "a second request was answered on the connection: {:?}",
            String::from_utf8_lossy(&later)
        );
    }
    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

async fn slow_body_after_a_complete_head(backend: Backend) {
    let app = slowloris_app(backend).await;
    let body = stripe_body("evt_slow_body");
    let mut head = format!("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len() + 1000).into_bytes();
    head.extend_from_slice(&stripe_signature_line(body.as_bytes()));
    head.extend_from_slice(b"\r\n\r\n");
    let mut stream = TcpStream::connect(socket_addr(&app)).await.unwrap();
    let idle_head = head.clone();
    let (first_drip, dripping_now) = oneshot::channel();
    let dripping =
        tokio::spawn(
            async move { drip(&mut stream, &head, Duration::from_secs(6), first_drip).await },
        );
    // A second client sends the same complete head and then nothing at all.
    let mut idle = TcpStream::connect(socket_addr(&app)).await.unwrap();
    idle.write_all(&idle_head).await.unwrap();
    let idling = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(Duration::from_secs(6), idle.read(&mut buf))
            .await
            .map(|r| r.map(|n| buf[..n].to_vec()))
    });
    let _ = dripping_now.await; // the slow client is mid-request
    a_normal_request_works(&app, "evt_during_slow_body").await;
    let (closed_after, _) = dripping.await.unwrap();
    let idle_answer = idling.await.unwrap();
    // The body has a deadline too (`server.request_timeout`): the dripping client and the
    // one that sends nothing after its head are both answered 408 and closed.
    assert!(
        closed_after.is_some_and(|d| d < Duration::from_secs(4)),
        "the slow body was not cut off: {closed_after:?}"
    );
    let idle_answer = idle_answer
        .expect("answered before 6 s")
        .expect("read the answer");
    assert!(
        idle_answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&idle_answer)
    );
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}
