//! Tampered bodies and headers; signature encodings, whitespace and case.

use crate::common::*;

both_backends!(
    tampered_bodies_and_headers_are_refused,
    signature_encodings_whitespace_and_case,
);

async fn tampered_bodies_and_headers_are_refused(backend: Backend) {
    let app = spawn(backend).await;
    let invalid = (401, "invalid_signature");
    let ts = now().to_string();

    // Stripe: a body changed after signing, by one byte or by a trailing newline.
    let body = stripe_body("evt_tamper");
    let signed = stripe_signed(&body);
    let cases = [
        ("stripe body one byte changed", body.replace("42", "43")),
        ("stripe body with a trailing newline", format!("{body}\n")),
        ("stripe body truncated", body[..body.len() - 1].to_owned()),
        (
            "stripe body with whitespace re-formatting",
            body.replace(',', ", "),
        ),
    ];
    for (case, tampered) in cases {
        refused(&app, case, "stripe", &signed, tampered, invalid).await;
    }
    // Stripe: the timestamp moved by one second (the MAC covers it).
    let later = (now() + 1).to_string();
    let sig = stripe_sig(STRIPE_SECRET, &ts, body.as_bytes());
    let moved = stripe_with(&format!("t={later},v1={sig}"));
    refused(
        &app,
        "stripe t moved by 1 s",
        "stripe",
        &moved,
        body.clone(),
        invalid,
    )
    .await;
    // Stripe: signed with another source's secret, or with a secret differing in one byte.
    let other = stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(GITHUB_SECRET, &ts, body.as_bytes())
    ));
    refused(
        &app,
        "stripe other secret",
        "stripe",
        &other,
        body.clone(),
        invalid,
    )
    .await;
    let near = STRIPE_SECRET.replace("current", "currenT");
    let near = stripe_with(&format!(
        "t={ts},v1={}",
        stripe_sig(&near, &ts, body.as_bytes())
    ));
    refused(
        &app,
        "stripe near secret",
        "stripe",
        &near,
        body.clone(),
        invalid,
    )
    .await;

    // GitHub: body changed.
    let gh_body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let headers = github_signed(&gh_body, "gh-tamper-1");
    let mut tampered = gh_body.clone();
    tampered[3] ^= 0x20;
    refused(
        &app,
        "github body changed",
        "github",
        &headers,
        tampered,
        invalid,
    )
    .await;
    // GitHub's legacy SHA-1 header alone is not accepted: there is no X-Hub-Signature-256.
    let sha1_only = h(&[
        (
            "X-Hub-Signature",
            "sha1=0000000000000000000000000000000000000000",
        ),
        ("X-GitHub-Delivery", "gh-sha1"),
    ]);
    refused(
        &app,
        "github sha1 header only",
        "github",
        &sha1_only,
        gh_body.clone(),
        (401, "missing_signature"),
    )
    .await;

    // Slack: the timestamp header changed (it is part of the signed string).
    let sl_body = slack_body("EvTamper");
    let mut headers = slack_signed_at(&ts, sl_body.as_bytes());
    headers[1].1 = later.clone();
    refused(
        &app,
        "slack timestamp changed",
        "slack",
        &headers,
        sl_body,
        invalid,
    )
    .await;

    // Svix: the id and the timestamp are signed; swapping either is refused, so a captured
    // request cannot be re-sent under another id to dodge deduplication.
    let sv_body = r#"{"type":"user.created"}"#;
    let mut headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    headers[0].1 = "msg_tamper_2".into();
    refused(&app, "svix id swapped", "svix", &headers, sv_body, invalid).await;
    let mut headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    headers[1].1 = later.clone();
    refused(
        &app,
        "svix timestamp changed",
        "svix",
        &headers,
        sv_body,
        invalid,
    )
    .await;
    let headers = svix_signed_at("msg_tamper", &ts, sv_body.as_bytes());
    refused(
        &app,
        "svix body changed",
        "svix",
        &headers,
        r#"{"type":"user.deleted"}"#,
        invalid,
    )
    .await;

    // Shopify and the generic HMAC provider: body changed.
    let sh_body = br#"{"id":1}"#.to_vec();
    let headers = shopify_with(&shopify_sig(SHOPIFY_SECRET, &sh_body), "shop-tamper");
    refused(
        &app,
        "shopify body changed",
        "shop",
        &headers,
        br#"{"id":2}"#.to_vec(),
        invalid,
    )
    .await;
    let headers = h(&[("X-Signature", &github_sig(GENERIC_SECRET, &sh_body))]);
    refused(
        &app,
        "generic body changed",
        "generic",
        &headers,
        br#"{"id":2}"#.to_vec(),
        invalid,
    )
    .await;

    assert_eq!(app.store.count_events().await.unwrap(), 0);

    // Accepted by design: GitHub signs only the body, so its unsigned headers (delivery id,
    // event name) can be changed by whoever holds a signed body: GitHub's scheme has no
    // timestamp and no signed id. The event is stored as sent, under the new delivery id.
    let mut headers = github_signed(&gh_body, "gh-original");
    headers[1].1 = "gh-replayed-under-new-id".into();
    headers[2].1 = "deployment".into();
    let event = accepted(
        &app,
        "github unsigned headers changed",
        "github",
        &headers,
        gh_body.clone(),
    )
    .await;
    assert_eq!(event.provider_event_id, "gh-replayed-under-new-id");
    assert_eq!(event.event_type.as_deref(), Some("deployment"));
    assert_eq!(event.body, gh_body);
    assert_eq!(app.store.count_events().await.unwrap(), 1);
}

// =======================================================================================
// Signature encodings, whitespace and case.

async fn signature_encodings_whitespace_and_case(backend: Backend) {
    let app = spawn(backend).await;
    let invalid = (401, "invalid_signature");
    let ts = now().to_string();

    let body = stripe_body("evt_enc");
    let mac = hmac_sha256(
        STRIPE_SECRET.as_bytes(),
        &cat(&format!("{ts}."), body.as_bytes()),
    );
    let hex_sig = hex::encode(&mac);
    let refusals = [
        ("stripe v1 in base64", format!("t={ts},v1={}", b64(&mac))),
        ("stripe v1 with 0x prefix", format!("t={ts},v1=0x{hex_sig}")),
        (
            "stripe v1 odd-length hex",
            format!("t={ts},v1={}", &hex_sig[1..]),
        ),
        (
            "stripe v1 truncated to 16 bytes",
            format!("t={ts},v1={}", &hex_sig[..32]),
        ),
        (
            "stripe v1 with an extra byte",
            format!("t={ts},v1={hex_sig}00"),
        ),
        (
            "stripe v1 with a space after =",
            format!("t={ts},v1= {hex_sig}"),
        ),
        (
            "stripe v1 with a space before =",
            format!("t={ts},v1 ={hex_sig}"),
        ),
        ("stripe key in upper case", format!("t={ts},V1={hex_sig}")),
        ("stripe t key in upper case", format!("T={ts},v1={hex_sig}")),
        ("stripe ; as pair separator", format!("t={ts};v1={hex_sig}")),
        ("stripe : as kv separator", format!("t={ts},v1:{hex_sig}")),
        ("stripe v0 only", format!("t={ts},v0={hex_sig}")),
        ("stripe signature only, no t", format!("v1={hex_sig}")),
        (
            "stripe hex with a tab inside",
            format!("t={ts},v1={}\t{}", &hex_sig[..10], &hex_sig[10..]),
        ),
        (
            "stripe hex in full-width digits",
            format!("t={ts},v1={}", full_width_digits(&hex_sig)),
        ),
    ];
    for (case, value) in refusals {
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

    // Accepted by design (each stores one event; the ids differ so none is a duplicate):
    // upper-case hex is decoded before the constant-time compare, so it is the same MAC.
    let b = stripe_body("evt_upper_hex");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes()).to_uppercase();
    accepted(
        &app,
        "stripe upper-case hex",
        "stripe",
        &stripe_with(&format!("t={ts},v1={sig}")),
        b,
    )
    .await;
    // Pairs are trimmed: spaces around the `,` separator are allowed (the MAC is unchanged).
    let b = stripe_body("evt_spaced_pairs");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    accepted(
        &app,
        "stripe spaces after commas",
        "stripe",
        &stripe_with(&format!("t={ts} ,  v1={sig} ")),
        b,
    )
    .await;
    // Leading/trailing whitespace of the whole value is not part of it in HTTP (OWS).
    let b = stripe_body("evt_ows");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    accepted(
        &app,
        "stripe value with surrounding spaces",
        "stripe",
        &stripe_with(&format!("   t={ts},v1={sig}\t")),
        b,
    )
    .await;
    // Rotation: one bad and one good `v1` verify through the good one.
    let b = stripe_body("evt_one_bad_one_good");
    let sig = stripe_sig(STRIPE_SECRET, &ts, b.as_bytes());
    let bad = "ab".repeat(32);
    accepted(
        &app,
        "stripe bad v1 then good v1",
        "stripe",
        &stripe_with(&format!("t={ts},v1={bad},v1={sig}")),
        b,
    )
    .await;
    // Rotation: a v1 made with the old secret; the event records secret index 1.
    let b = stripe_body("evt_old_secret_v1");
    let sig = stripe_sig(STRIPE_OLD_SECRET, &ts, b.as_bytes());
    let event = accepted(
        &app,
        "stripe old secret",
        "stripe",
        &stripe_with(&format!("t={ts},v1=zz,v1={sig}")),
        b,
    )
    .await;
    assert_eq!(event.verified_secret_index, 1);
    let mut stored = 5;
    assert_eq!(app.store.count_events().await.unwrap(), stored);

    // GitHub: the prefix is exact, the encoding hex.
    let gh_body = br#"{"zen":"Keep it logically awesome."}"#.to_vec();
    let gh_mac = hmac_sha256(GITHUB_SECRET.as_bytes(), &gh_body);
    let gh_hex = hex::encode(&gh_mac);
    let refusals = [
        (
            "github base64 signature",
            format!("sha256={}", b64(&gh_mac)),
        ),
        ("github prefix in upper case", format!("SHA256={gh_hex}")),
        ("github no prefix", gh_hex.clone()),
        ("github sha1= prefix", format!("sha1={gh_hex}")),
        ("github space inside prefix", format!("sha256 ={gh_hex}")),
        ("github space after prefix", format!("sha256= {gh_hex}")),
        ("github doubled prefix", format!("sha256=sha256={gh_hex}")),
        (
            "github two signatures in one value",
            format!("sha256={gh_hex},sha256={gh_hex}"),
        ),
    ];
    for (case, value) in refusals {
        let headers = github_with(&value, "gh-enc");
        refused(&app, case, "github", &headers, gh_body.clone(), invalid).await;
    }
    let headers = github_with(&format!("sha256={}", gh_hex.to_uppercase()), "gh-upper");
    accepted(
        &app,
        "github upper-case hex",
        "github",
        &headers,
        gh_body.clone(),
    )
    .await;
    stored += 1;

    // Standard Webhooks: base64, space-separated `v1,<sig>` items.
    let sv_body = br#"{"type":"invoice.created"}"#.to_vec();
    let sv = |id: &str| svix_sig(SVIX_SECRET, id, &ts, &sv_body);
    let key = base64::engine::general_purpose::STANDARD
        .decode(SVIX_SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let sv_mac = |id: &str| hmac_sha256(&key, &cat(&format!("{id}.{ts}."), &sv_body));
    let refusals = [
        (
            "svix hex signature",
            format!("v1,{}", hex::encode(sv_mac("msg_enc"))),
        ),
        ("svix v1= instead of v1,", format!("v1={}", sv("msg_enc"))),
        ("svix space after comma", format!("v1, {}", sv("msg_enc"))),
        ("svix v2 version", format!("v2,{}", sv("msg_enc"))),
        (
            "svix version in upper case",
            format!("V1,{}", sv("msg_enc")),
        ),
        (
            "svix v1a (asymmetric) only",
            format!("v1a,{}", sv("msg_enc")),
        ),
        (
            "svix comma-separated list",
            format!("v1,{},v1,{}", "QUFB", sv("msg_enc")),
        ),
        (
            "svix tab-separated list",
            format!("v1,QUFB\tv1,{}", sv("msg_enc")),
        ),
    ];
    for (case, value) in refusals {
        let headers = svix_with("msg_enc", &ts, &value);
        refused(&app, case, "svix", &headers, sv_body.clone(), invalid).await;
    }
    // base64url is another alphabet: a MAC whose base64 has '+' or '/' is refused in base64url.
    let (url_id, url_sig) = (0..)
        .map(|i| format!("msg_url_{i}"))
        .map(|id| {
            let s = sv(&id);
            (id, s)
        })
        .find(|(_, s)| s.contains('+') || s.contains('/'))
        .unwrap();
    let url_safe = url_sig.replace('+', "-").replace('/', "_");
    let headers = svix_with(&url_id, &ts, &format!("v1,{url_safe}"));
    refused(
        &app,
        "svix base64url alphabet",
        "svix",
        &headers,
        sv_body.clone(),
        invalid,
    )
    .await;
    // Accepted by design: padding is optional (senders disagree on it), items may be separated
    // by several spaces, and unknown versions (v1a) are skipped rather than refused.
    let id = "msg_unpadded";
    let headers = svix_with(id, &ts, &format!("v1,{}", sv(id).trim_end_matches('=')));
    accepted(
        &app,
        "svix unpadded base64",
        "svix",
        &headers,
        sv_body.clone(),
    )
    .await;
    let id = "msg_multi_space";
    let headers = svix_with(id, &ts, &format!("v1a,QUFB   v1,QUFB  v1,{}", sv(id)));
    accepted(
        &app,
        "svix several spaces and a v1a item",
        "svix",
        &headers,
        sv_body.clone(),
    )
    .await;
    stored += 2;

    // Shopify: base64 of the body's HMAC, the whole value; hex or a prefix is refused.
    let sh_body = br#"{"order":1}"#.to_vec();
    let sh_mac = hmac_sha256(SHOPIFY_SECRET.as_bytes(), &sh_body);
    let headers = shopify_with(&hex::encode(&sh_mac), "shop-hex");
    refused(
        &app,
        "shopify hex signature",
        "shop",
        &headers,
        sh_body.clone(),
        invalid,
    )
    .await;
    let headers = shopify_with(&format!("sha256={}", b64(&sh_mac)), "shop-prefixed");
    refused(
        &app,
        "shopify with a prefix",
        "shop",
        &headers,
        sh_body.clone(),
        invalid,
    )
    .await;
    let headers = shopify_with(&b64(&sh_mac), "shop-ok");
    accepted(&app, "shopify base64", "shop", &headers, sh_body.clone()).await;
    stored += 1;

    // Slack: `v0=` prefix and hex.
    let sl_body = slack_body("EvEnc");
    let sl_sig = slack_sig(SLACK_SECRET, &ts, sl_body.as_bytes());
    for (case, value) in [
        ("slack no v0= prefix", sl_sig.clone()),
        ("slack v1= prefix", format!("v1={sl_sig}")),
        (
            "slack base64 signature",
            format!("v0={}", b64(&hex::decode(&sl_sig).unwrap())),
        ),
    ] {
        let headers = slack_with(&value, &ts);
        refused(&app, case, "slack", &headers, sl_body.clone(), invalid).await;
    }

    assert_eq!(app.store.count_events().await.unwrap(), stored);
}
