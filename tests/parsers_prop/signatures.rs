//! Every correctly signed request verifies; nothing verifies without the true MAC.

use crate::common::*;

proptest! {
    #![proptest_config(config())]

    /// Signed correctly with one of several secrets, at a time within the tolerance: accepted,
    /// with the id that was sent and the index of the first secret that matches.
    #[test]
    fn every_correct_signature_verifies(
        kind in kind(),
        raw_secrets in proptest::collection::vec(raw_secret(), 1..4),
        which in any::<prop::sample::Index>(),
        id in event_id(),
        offset in -TOLERANCE..=TOLERANCE,
        body in filler(),
    ) {
        let secrets: Vec<Secret> = raw_secrets.iter().map(|r| secret_for(kind, r)).collect();
        let k = which.index(secrets.len());
        let signed = Signed::new(kind, &secrets[k], &id, NOW + offset, &body);
        let expected_index = secrets.iter().position(|s| s.key == secrets[k].key).unwrap();
        match signed.verify(&verifier(kind, &secrets)) {
            Ok(Verified::Event(event)) => {
                prop_assert_eq!(event.provider_event_id().as_str(), id.as_str());
                prop_assert_eq!(event.secret_index(), expected_index);
                prop_assert_eq!(&event.body()[..], &signed.body[..]);
                prop_assert_eq!(event.scheme(), kind.provider());
            }
            other => prop_assert!(false, "{:?} refused: {:?}", kind, other),
        }
    }

    /// Correctly signed, but outside the tolerance (either direction): refused for the
    /// timestamp alone.
    #[test]
    fn correct_signature_outside_the_tolerance_is_refused(
        kind in select(vec![Kind::Stripe, Kind::Slack, Kind::Svix]),
        id in event_id(),
        offset in prop_oneof![(TOLERANCE + 1)..1_000_000_000i64, -NOW..-TOLERANCE],
        body in filler(),
    ) {
        let secret = secret_for(kind, b"tolerance");
        let signed = Signed::new(kind, &secret, &id, NOW + offset, &body);
        let result = signed.verify(&verifier(kind, &[secret]));
        prop_assert_eq!(result.err(), Some(VerifyError::TimestampOutOfTolerance(TOLERANCE)));
    }

    /// One character of the encoded MAC changed to another character of its alphabet (for
    /// hex, a different digit, not merely another case): always refused.
    #[test]
    fn one_changed_signature_character_is_refused(
        kind in kind(),
        id in event_id(),
        body in filler(),
        at in any::<prop::sample::Index>(),
        step in 1usize..16,
    ) {
        let secret = secret_for(kind, b"one-char");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        let mac = hmac_sha256(&secret.key, &kind.signed_payload(&signed.body, &signed.ts, &signed.id));
        let sig = kind.encode(&mac);
        let data_len = sig.trim_end_matches('=').len();
        let i = at.index(data_len);
        let alphabet: Vec<char> = if kind.base64() {
            ('A'..='Z').chain('a'..='z').chain('0'..='9').chain(['+', '/']).collect()
        } else {
            ('0'..='9').chain('a'..='f').collect()
        };
        let old = sig[i..=i].chars().next().unwrap();
        let pos = alphabet.iter().position(|&c| c == old).unwrap();
        let new = alphabet[(pos + step) % alphabet.len()];
        let mutated = format!("{}{new}{}", &sig[..i], &sig[i + 1..]);
        prop_assert_ne!(&mutated, &sig);
        signed.headers[0].1 = kind.wrap(&signed.ts, &mutated);
        let result = signed.verify(&verifier(kind, &[secret]));
        prop_assert!(
            matches!(result, Err(VerifyError::InvalidSignature | VerifyError::MalformedSignature(_))),
            "{:?} accepted a changed signature {:?}: {:?}", kind, signed.headers[0].1, result
        );
    }

    /// Arbitrary edits anywhere in a signed request's headers: whenever verification still
    /// succeeds, the (edited) signature header really holds the MAC of what the verifier
    /// checked (the timestamp and id as they now are). Mutations that keep the MAC intact
    /// (a space after a comma, upper-case hex, dropped base64 padding) may pass; nothing else.
    #[test]
    fn acceptance_implies_the_true_mac_is_present(
        kind in kind(),
        id in event_id(),
        body in filler(),
        target in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let secret = secret_for(kind, b"mutations");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        // The signature header most of the time, the others (timestamp, id) too.
        let t = if target.index(4) == 0 { target.index(signed.headers.len()) } else { 0 };
        for m in &mutations {
            signed.headers[t].1 = apply(&signed.headers[t].1, m);
        }
        if let Ok(verified) = signed.verify(&verifier(kind, std::slice::from_ref(&secret))) {
            let truth = signed.true_mac().expect("an accepted request has its signed values");
            prop_assert!(
                signed.candidates().contains(&truth),
                "{:?} accepted {:?} without the true MAC: {:?}", kind, signed.headers, verified
            );
        }
    }

    /// Decoys next to the real signature (rotation, several versions): accepted through the
    /// real one, refused when it is left out.
    #[test]
    fn decoys_alone_are_refused_and_with_the_real_one_accepted(
        kind in select(vec![Kind::Stripe, Kind::Svix]),
        id in event_id(),
        body in filler(),
        decoys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 32), 1..4),
        at in any::<prop::sample::Index>(),
    ) {
        let secret = secret_for(kind, b"decoys");
        let mut signed = Signed::new(kind, &secret, &id, NOW, &body);
        let real = hmac_sha256(&secret.key, &kind.signed_payload(&signed.body, &signed.ts, &signed.id));
        prop_assume!(!decoys.contains(&real));
        let v = verifier(kind, std::slice::from_ref(&secret));
        let value = |sigs: &[Vec<u8>]| match kind {
            Kind::Stripe => std::iter::once(format!("t={}", signed.ts))
                .chain(sigs.iter().map(|s| format!("v1={}", hex::encode(s))))
                .collect::<Vec<_>>()
                .join(","),
            _ => sigs
                .iter()
                .map(|s| format!("v1,{}", kind.encode(s)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        signed.headers[0].1 = value(&decoys);
        prop_assert_eq!(signed.verify(&v).err(), Some(VerifyError::InvalidSignature));
        let mut with_real = decoys.clone();
        with_real.insert(at.index(decoys.len() + 1), real);
        signed.headers[0].1 = value(&with_real);
        prop_assert!(signed.verify(&v).is_ok(), "refused {:?}", signed.headers[0].1);
    }

    /// The same request verified against secrets that did not sign it: refused.
    #[test]
    fn other_secrets_are_refused(
        kind in kind(),
        signing in raw_secret(),
        others in proptest::collection::vec(raw_secret(), 1..4),
        id in event_id(),
        body in filler(),
    ) {
        let signing = secret_for(kind, &signing);
        let others: Vec<Secret> = others.iter().map(|r| secret_for(kind, r)).collect();
        prop_assume!(others.iter().all(|o| o.key != signing.key));
        let signed = Signed::new(kind, &signing, &id, NOW, &body);
        prop_assert_eq!(signed.verify(&verifier(kind, &others)).err(), Some(VerifyError::InvalidSignature));
    }
}
