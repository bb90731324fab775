//! `hookgate check` on broker destinations: every key checked at start-up, naming the key,
//! with no broker needed (the URLs here point at ports nothing listens on).

use super::{assert_rejected_naming, check};

const SOURCE: &str = r#"
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_a"]
destinations = ["bus"]
"#;

fn with(destination: &str) -> String {
    format!("{SOURCE}\n[[destinations]]\nname = \"bus\"\n{destination}\n")
}

const NATS: &str = "kind = \"nats\"\nurl = \"nats://127.0.0.1:1\"\nsubject = \"webhooks.{source}.{event_type}\"\nstream = \"WEBHOOKS\"";
const RABBIT: &str = "kind = \"rabbitmq\"\nurl = \"amqp://u:p@127.0.0.1:1/%2f\"\nexchange = \"webhooks\"\nrouting_key = \"{source}.{event_type}\"";

#[test]
fn broker_destinations_pass_check_without_a_broker() {
    for d in [NATS, RABBIT] {
        let out = check(&with(d), &[]);
        assert!(
            out.status.success(),
            "{d}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let signed = format!("{NATS}\nsigning_secret = \"whsec_c2VjcmV0LXNpZ25pbmcta2V5\"");
    assert!(check(&with(&signed), &[]).status.success());
    let from_env = RABBIT.replace("amqp://u:p@127.0.0.1:1/%2f", "env:HG_TEST_AMQP_URL");
    assert!(check(
        &with(&from_env),
        &[("HG_TEST_AMQP_URL", "amqp://u:p@127.0.0.1:1/%2f")]
    )
    .status
    .success());
}

#[test]
fn bad_broker_destinations_are_refused_naming_the_key() {
    let cases = [
        (
            NATS.replace("kind = \"nats\"", "kind = \"kafka\""),
            "`destinations[0].kind` is \"kafka\"",
        ),
        (
            NATS.replace("nats://127.0.0.1:1", "http://127.0.0.1:1"),
            "`destinations[0].url` must be a URL with a host and the scheme nats:// or tls://",
        ),
        (
            NATS.replace("webhooks.{source}.{event_type}", "webhooks.{tenant}"),
            "`destinations[0].subject` names {tenant}",
        ),
        (
            NATS.replace("webhooks.{source}.{event_type}", "webhooks.>"),
            "`destinations[0].subject` would publish to a subject with '>'",
        ),
        (
            NATS.replace("webhooks.{source}.{event_type}", "webhooks..{source}"),
            "`destinations[0].subject` would publish to a subject with an empty token",
        ),
        (
            NATS.replace("stream = \"WEBHOOKS\"", "stream = \"web.hooks\""),
            "`destinations[0].stream` must be a JetStream stream name",
        ),
        (
            NATS.replace("subject = \"webhooks.{source}.{event_type}\"", ""),
            "`destinations[0].subject` is required for kind = \"nats\"",
        ),
        (
            format!("{NATS}\nexchange = \"x\""),
            "`destinations[0].exchange` does not apply to a destination of kind = \"nats\"",
        ),
        (
            RABBIT.replace(
                "exchange = \"webhooks\"",
                "exchange = \"hooks.{event_type}\"",
            ),
            "`destinations[0].exchange` may name {source} and {destination} only",
        ),
        (
            RABBIT.replace("exchange = \"webhooks\"", "exchange = \"a/b\""),
            "`destinations[0].exchange` would name an exchange with '/'",
        ),
        (
            RABBIT.replace("routing_key = \"{source}.{event_type}\"", ""),
            "`destinations[0].routing_key` is required",
        ),
        (
            RABBIT.replace("amqp://u:p@127.0.0.1:1/%2f", "amqp://u:hunter2@"),
            "`destinations[0].url` must be a URL with a host and the scheme amqp:// or amqps://",
        ),
        (
            format!("{RABBIT}\nsubject = \"x\""),
            "`destinations[0].subject` does not apply",
        ),
        (
            "url = \"http://127.0.0.1:1/x\"".to_owned(),
            "`destinations[0].signing_secret` is required for an HTTP destination",
        ),
        (
            "url = \"http://127.0.0.1:1/x\"\nsigning_secret = \"whsec_c2VjcmV0\"\nsubject = \"a\""
                .to_owned(),
            "`destinations[0].subject` does not apply to a destination of kind = \"http\"",
        ),
    ];
    for (destination, expected) in cases {
        assert_rejected_naming(&with(&destination), &[], expected);
        let out = check(&with(&destination), &[]);
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("hunter2"),
            "a URL's password is never printed"
        );
    }
}
