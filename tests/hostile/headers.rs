//! Empty values, duplicate and repeated headers, timestamps.

use crate::common::*;

both_backends!(
    empty_values_are_refused,
    duplicate_and_repeated_headers,
    timestamps_far_past_far_future_and_non_numeric,
);

async fn empty_values_are_refused(backend: Backend) {
    let app = spawn(backend).await;
    let ts = now().to_string();
    let missing = (401, "missing_signature");
    let invalid = (401, "invalid_signature");

    let body = stripe_body("evt_empty");
    // A header that is present but empty (or blank) is the same as no header.
    refused(
        &app,
        "stripe empty header",
        "stripe",
        &stripe_with(""),
        body.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "stripe blank header",
        "stripe",
        &stripe_with("   "),
        body.clone(),
        missing,
    )
    .await;
    for (case, value) in [
        ("stripe empty pairs", "t=,v1=".to_owned()),
        ("stripe only separators", ",,,".to_owned()),
        ("stripe only =", "=".to_owned()),
        ("stripe empty v1", format!("t={ts},v1=")),
    ] {
        refused(
            &app,
            case,
            "stripe",
            &stripe_with(&value),
            body.clone(),
            invalid,
        )
        .await;
    }
    // An empty t= with a MAC over an empty timestamp: the MAC matches, the timestamp is not
    // a number.
    let sig = stripe_sig(STRIPE_SECRET, "", body.as_bytes());
    refused(
        &app,
        "stripe empty t, signed",
        "stripe",
        &stripe_with(&format!("t=,v1={sig}")),
        body.clone(),
        invalid,
    )
    .await;

    let gh = b"{}".to_vec();
    refused(
        &app,
        "github empty signature",
        "github",
        &github_with("", "gh-e"),
        gh.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "github empty after prefix",
        "github",
        &github_with("sha256=", "gh-e"),
        gh.clone(),
        invalid,
    )
    .await;
    // Verified, but the delivery id (the dedupe key) is empty.
    let sig = format!("sha256={}", github_sig(GITHUB_SECRET, &gh));
    refused(
        &app,
        "github empty delivery id",
        "github",
        &github_with(&sig, ""),
        gh.clone(),
        (400, "missing_event_id"),
    )
    .await;
    refused(
        &app,
        "github blank delivery id",
        "github",
        &github_with(&sig, "   "),
        gh.clone(),
        (400, "missing_event_id"),
    )
    .await;

    let sv = br#"{"type":"x"}"#.to_vec();
    refused(
        &app,
        "svix empty signature",
        "svix",
        &svix_with("msg_e", &ts, ""),
        sv.clone(),
        missing,
    )
    .await;
    refused(
        &app,
        "svix v1, with nothing",
        "svix",
        &svix_with("msg_e", &ts, "v1,"),
        sv.clone(),
        invalid,
    )
    .await;
    // The id is signed: an empty id cannot be checked (and would be no dedupe key).
    let signed_empty_id = format!("v1,{}", svix_sig(SVIX_SECRET, "", &ts, &sv));
    refused(
        &app,
        "svix empty id, signed",
        "svix",
        &svix_with("", &ts, &signed_empty_id),
        sv.clone(),
        invalid,
    )
    .await;
    // An empty timestamp header is present: the MAC is checked over it, then refused.
    let signed_empty_ts = format!("v1,{}", svix_sig(SVIX_SECRET, "msg_e", "", &sv));
    refused(
        &app,
        "svix empty timestamp, signed",
        "svix",
        &svix_with("msg_e", "", &signed_empty_ts),
        sv.clone(),
        invalid,
    )
    .await;

    let sl = slack_body("EvEmpty");
    let sig = format!("v0={}", slack_sig(SLACK_SECRET, "", sl.as_bytes()));
    refused(
        &app,
        "slack empty timestamp, signed",
        "slack",
        &slack_with(&sig, ""),
        sl.clone(),
        invalid,
    )
    .await;
    refused(
        &app,
        "slack empty signature",
        "slack",
        &slack_with("", &ts),
        sl.clone(),
        missing,
    )
    .await;
    // No timestamp header at all.
    let headers = h(&[(
        "X-Slack-Signature",
        &format!("v0={}", slack_sig(SLACK_SECRET, &ts, sl.as_bytes())),
    )]);
    refused(
        &app,
        "slack no timestamp header",
        "slack",
        &headers,
        sl.clone(),
        missing,
    )
    .await;

    refused(
        &app,
        "shopify empty signature",
        "shop",
        &shopify_with("", "s"),
        b"{}".to_vec(),
        missing,
    )
    .await;
    // An empty body, correctly signed: verified, but Stripe's id is read from the body.
    let sig = stripe_sig(STRIPE_SECRET, &ts, b"");
    refused(
        &app,
        "stripe empty body, signed",
        "stripe",
        &stripe_with(&format!("t={ts},v1={sig}")),
        "",
        (400, "malformed_body"),
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);
}

// =======================================================================================
// Duplicate and repeated headers.

async fn duplicate_and_repeated_headers(backend: Backend) {
    let app = spawn(backend).await;
    let ts = now().to_string();
    let invalid = (401, "invalid_signature");

    // The same signature header twice, even with both copies valid, is refused rather than
    // guessed at (README: "A signature header sent twice is refused").
    let body = stripe_body("evt_repeat");
    let mut headers = stripe_signed(&body);
    headers.push(headers[0].clone());
    refused(
        &app,
        "stripe header twice, both valid",
        "stripe",
        &headers,
        body.clone(),
        invalid,
    )
    .await;
    let mut headers = stripe_with(&format!("t={ts},v1={}", "00".repeat(32)));
    headers.extend(stripe_signed(&body).into_iter().take(1));
    refused(
        &app,
        "stripe bad header then good header",
        "stripe",
        &headers,
        body.clone(),
        invalid,
    )
    .await;
    // Two t= in one value make the signed string ambiguous.
    let sig = stripe_sig(STRIPE_SECRET, &ts, body.as_bytes());
    let value = format!("t={ts},t={ts},v1={sig}");
    refused(
        &app,
        "stripe two t= pairs",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;
    let value = format!("t={ts},v1={sig},t=1");
    refused(
        &app,
        "stripe t= after the signature",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;
    // Two values folded into one by a proxy (RFC 9110 list folding) carry two t= pairs.
    let value = format!("t={ts},v1={sig}, t={ts},v1={sig}");
    refused(
        &app,
        "stripe two values folded into one",
        "stripe",
        &stripe_with(&value),
        body.clone(),
        invalid,
    )
    .await;

    let gh = br#"{"a":1}"#.to_vec();
    let mut headers = github_signed(&gh, "gh-rep");
    headers.push(headers[0].clone());
    refused(
        &app,
        "github signature twice",
        "github",
        &headers,
        gh.clone(),
        invalid,
    )
    .await;

    let sl = slack_body("EvRep");
    let mut headers = slack_signed_at(&ts, sl.as_bytes());
    headers.push(headers[0].clone());
    refused(
        &app,
        "slack signature twice",
        "slack",
        &headers,
        sl.clone(),
        invalid,
    )
    .await;
    let mut headers = slack_signed_at(&ts, sl.as_bytes());
    headers.push(headers[1].clone());
    refused(
        &app,
        "slack timestamp twice",
        "slack",
        &headers,
        sl.clone(),
        invalid,
    )
    .await;

    let sv = br#"{"type":"x"}"#.to_vec();
    for (case, index) in [
        ("svix id twice", 0),
        ("svix timestamp twice", 1),
        ("svix signature twice", 2),
    ] {
        let mut headers = svix_signed_at("msg_rep", &ts, &sv);
        headers.push(headers[index].clone());
        refused(&app, case, "svix", &headers, sv.clone(), invalid).await;
    }
    // Both header families: `webhook-signature` comes first in the definition and is used;
    // a bad one there is not rescued by a good `svix-signature`.
    let mut headers = svix_signed_at("msg_both", &ts, &sv);
    headers.push(("webhook-signature".into(), format!("v1,{}", b64(&[0; 32]))));
    refused(
        &app,
        "svix bad webhook-signature beside a good svix-signature",
        "svix",
        &headers,
        sv.clone(),
        invalid,
    )
    .await;

    let sh = b"{}".to_vec();
    let mut headers = shopify_with(&shopify_sig(SHOPIFY_SECRET, &sh), "shop-rep");
    headers.push(headers[0].clone());
    refused(
        &app,
        "shopify signature twice",
        "shop",
        &headers,
        sh.clone(),
        invalid,
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: GitHub's delivery id is not signed, so a repeated one is not an
    // authentication question; the first value is the dedupe key.
    let mut headers = github_signed(&gh, "gh-first");
    headers.push(("X-GitHub-Delivery".into(), "gh-second".into()));
    let event = accepted(
        &app,
        "github delivery id twice",
        "github",
        &headers,
        gh.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "gh-first");
    // Every copy is kept in the stored headers, in the order received.
    let deliveries: Vec<_> = event
        .headers
        .iter()
        .filter(|(n, _)| n == "x-github-delivery")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(deliveries, ["gh-first", "gh-second"]);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Timestamps.

async fn timestamps_far_past_far_future_and_non_numeric(backend: Backend) {
    let app = spawn(backend).await;
    let tolerance = (401, "timestamp_out_of_tolerance");
    let invalid = (401, "invalid_signature");
    let n = now();

    // (case, timestamp as sent, answer). The MAC is always correct for the string sent, so
    // the answer is about the timestamp alone.
    let cases: Vec<(&str, String, (u16, &str))> = vec![
        ("epoch", "0".into(), tolerance),
        ("one", "1".into(), tolerance),
        ("an hour ago", (n - 3600).to_string(), tolerance),
        ("301 s ago", (n - 301 - 5).to_string(), tolerance),
        ("an hour ahead", (n + 3600).to_string(), tolerance),
        (
            "a century ahead",
            (n + 100 * 365 * 86_400).to_string(),
            tolerance,
        ),
        ("i64::MAX", i64::MAX.to_string(), tolerance),
        ("past i64::MAX", "99999999999999999999999".into(), tolerance),
        ("milliseconds", (n * 1000).to_string(), tolerance),
        ("negative", format!("-{n}"), invalid),
        ("plus sign", format!("+{n}"), invalid),
        ("decimal", format!("{n}.0"), invalid),
        ("exponent", "1.7e9".into(), invalid),
        ("hex", format!("0x{n:x}"), invalid),
        ("letters", "abc".into(), invalid),
        ("RFC 3339", "2024-05-01T00:00:00Z".into(), invalid),
        (
            "inner space",
            format!("{} {}", &n.to_string()[..5], &n.to_string()[5..]),
            invalid,
        ),
        (
            "full-width digits",
            n.to_string()
                .chars()
                .map(|c| char::from_u32(c as u32 - '0' as u32 + 0xFF10).unwrap())
                .collect(),
            invalid,
        ),
    ];
    for (i, (case, ts, expect)) in cases.iter().enumerate() {
        let body = stripe_body(&format!("evt_ts_{i}"));
        let value = format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, ts, body.as_bytes())
        );
        refused(
            &app,
            &format!("stripe {case}"),
            "stripe",
            &stripe_with(&value),
            body,
            *expect,
        )
        .await;

        let sl = slack_body(&format!("EvTs{i}"));
        let headers = slack_signed_at(ts, sl.as_bytes());
        refused(
            &app,
            &format!("slack {case}"),
            "slack",
            &headers,
            sl,
            *expect,
        )
        .await;

        let sv = br#"{"type":"t"}"#.to_vec();
        let headers = svix_signed_at(&format!("msg_ts_{i}"), ts, &sv);
        refused(&app, &format!("svix {case}"), "svix", &headers, sv, *expect).await;
    }
    // A wrong MAC with a stale timestamp is an invalid signature: the MAC is checked first,
    // so an unauthenticated caller learns nothing about the clock.
    let body = stripe_body("evt_ts_forged");
    let value = format!("t=1,v1={}", "00".repeat(32));
    refused(
        &app,
        "forged and stale",
        "stripe",
        &stripe_with(&value),
        body,
        invalid,
    )
    .await;
    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: within the 300 s tolerance in both directions; and leading zeros,
    // since the MAC covers the exact digits sent and their value is in tolerance.
    let ok: [(&str, String); 3] = [
        ("250 s ago", (n - 250).to_string()),
        ("250 s ahead", (n + 250).to_string()),
        ("leading zeros", format!("000{n}")),
    ];
    for (i, (case, ts)) in ok.iter().enumerate() {
        let body = stripe_body(&format!("evt_ts_ok_{i}"));
        let value = format!(
            "t={ts},v1={}",
            stripe_sig(STRIPE_SECRET, ts, body.as_bytes())
        );
        accepted(&app, case, "stripe", &stripe_with(&value), body).await;
    }
    assert_eq!(app.store.count_events().await.unwrap(), 3);
}
