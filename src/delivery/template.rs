//! Subject, routing-key and exchange templates of broker destinations:
//! `webhooks.{source}.{event_type}`, parsed and checked at start-up, rendered per delivery.
//!
//! A rendered value never changes the shape of what the broker sees: `.`, `*`, `>`, `#`,
//! spaces and every other byte outside `A-Z a-z 0-9 - _` are written `%XX` (and so is `%`),
//! so a Stripe type `invoice.paid` is one subject token, `invoice%2Epaid`, and a value can
//! never add a token or a wildcard. An empty or missing value is `_`.

use std::fmt::Write as _;

/// A value a template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Source,
    EventType,
    Destination,
}

impl Field {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "source" => Some(Self::Source),
            "event_type" => Some(Self::EventType),
            "destination" => Some(Self::Destination),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Value(Field),
}

/// The values of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    pub source: &'a str,
    pub event_type: Option<&'a str>,
    pub destination: &'a str,
}

/// What a rendered template must be: a NATS subject, an AMQP routing key or exchange name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NatsSubject,
    RoutingKey,
    Exchange,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    kind: Kind,
}

/// Longest routing key or exchange name AMQP 0-9-1 carries (a short string).
pub const AMQP_NAME_MAX: usize = 255;

impl Template {
    /// Parses and checks a template: known `{names}`, and literal text that yields a valid
    /// subject, routing key or exchange name whatever the values.
    pub fn parse(text: &str, kind: Kind) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| format!("has an unclosed `{{` in {text:?}"))?;
            let name = &rest[open + 1..close];
            let field = Field::parse(name).ok_or_else(|| {
                format!("names {{{name}}}; a template may name {{source}}, {{event_type}} and {{destination}}")
            })?;
            if kind == Kind::Exchange && field == Field::EventType {
                return Err(
                    "may name {source} and {destination} only: exchanges are declared ahead, \
                     not one per event type"
                        .into(),
                );
            }
            parts.push(Part::Value(field));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        if parts
            .iter()
            .any(|p| matches!(p, Part::Literal(l) if l.contains('}')))
        {
            return Err(format!("has a `}}` without its `{{` in {text:?}"));
        }
        let template = Self { parts, kind };
        // Values render as `[A-Za-z0-9_%-]+`, so one sample shows whether the literal text
        // can ever yield an invalid name.
        let sample = template.render(&Values {
            source: "s",
            event_type: Some("t"),
            destination: "d",
        });
        check(&sample, kind).map_err(|p| format!("{p} (in {text:?})"))?;
        Ok(template)
    }

    /// The subject, routing key or exchange name for one delivery's values.
    pub fn render(&self, values: &Values<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Value(Field::Source) => escape_into(&mut out, values.source),
                Part::Value(Field::Destination) => escape_into(&mut out, values.destination),
                Part::Value(Field::EventType) => {
                    escape_into(&mut out, values.event_type.unwrap_or(""))
                }
            }
        }
        out
    }

    /// Whether the template names any value (a fixed subject needs no rendering).
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
}

fn escape_into(out: &mut String, value: &str) {
    if value.is_empty() {
        out.push('_');
        return;
    }
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Checks a rendered name against its broker's rules.
pub fn check(name: &str, kind: Kind) -> Result<(), String> {
    match kind {
        Kind::NatsSubject => {
            if name.is_empty() {
                return Err("is empty".into());
            }
            if let Some(c) = name
                .chars()
                .find(|c| !c.is_ascii_graphic() || matches!(c, '*' | '>'))
            {
                return Err(format!(
                    "would publish to a subject with {c:?}: no spaces, control characters or wildcards"
                ));
            }
            if name.split('.').any(str::is_empty) {
                return Err("would publish to a subject with an empty token (a leading, trailing or doubled `.`)".into());
            }
        }
        Kind::RoutingKey => {
            if name.len() > AMQP_NAME_MAX {
                return Err(format!("is longer than {AMQP_NAME_MAX} bytes"));
            }
        }
        Kind::Exchange => {
            if name.len() > AMQP_NAME_MAX {
                return Err(format!("is longer than {AMQP_NAME_MAX} bytes"));
            }
            if let Some(c) = name
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
            {
                return Err(format!(
                    "would name an exchange with {c:?}: only letters, digits, '-', '_', '.' and ':'"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(event_type: Option<&'a str>) -> Values<'a> {
        Values {
            source: "stripe",
            event_type,
            destination: "bus",
        }
    }

    #[test]
    fn renders_values_as_single_escaped_tokens() {
        let t = Template::parse("webhooks.{source}.{event_type}", Kind::NatsSubject).unwrap();
        assert_eq!(
            t.render(&values(Some("invoice.paid"))),
            "webhooks.stripe.invoice%2Epaid"
        );
        assert_eq!(
            t.render(&values(Some("a *>#% b"))),
            "webhooks.stripe.a%20%2A%3E%23%25%20b"
        );
        assert_eq!(t.render(&values(None)), "webhooks.stripe._");
        assert_eq!(t.render(&values(Some(""))), "webhooks.stripe._");
        assert_eq!(t.render(&values(Some("é"))), "webhooks.stripe.%C3%A9");
        for hostile in ["..", "*", ">", " ", "a.b.c", "\u{0}", "%"] {
            let subject = t.render(&values(Some(hostile)));
            check(&subject, Kind::NatsSubject).unwrap();
            assert_eq!(subject.split('.').count(), 3, "{hostile:?} -> {subject}");
        }
    }

    #[test]
    fn refuses_bad_templates_at_parse() {
        let err = |t, k| Template::parse(t, k).unwrap_err();
        assert!(err("a.{nope}", Kind::NatsSubject).contains("names {nope}"));
        assert!(err("a.{source", Kind::NatsSubject).contains("unclosed"));
        assert!(err("a.source}", Kind::NatsSubject).contains("without its"));
        assert!(err("a..{source}", Kind::NatsSubject).contains("empty token"));
        assert!(err("{source}.", Kind::NatsSubject).contains("empty token"));
        assert!(err("a.*.{source}", Kind::NatsSubject).contains("wildcards"));
        assert!(err("a b", Kind::NatsSubject).contains("spaces"));
        assert!(err("", Kind::NatsSubject).contains("empty"));
        assert!(err("ex.{event_type}", Kind::Exchange).contains("exchanges are declared"));
        assert!(err("ex/1", Kind::Exchange).contains("only letters"));
        assert!(err(&"k".repeat(256), Kind::RoutingKey).contains("255"));
        assert!(
            Template::parse("", Kind::Exchange).is_ok(),
            "the default exchange"
        );
        assert!(Template::parse("hooks.{source}", Kind::Exchange).is_ok());
        assert!(Template::parse("{source}.{event_type}", Kind::RoutingKey).is_ok());
    }

    #[test]
    fn fixed_templates_need_no_values() {
        assert!(Template::parse("webhooks", Kind::NatsSubject)
            .unwrap()
            .is_fixed());
        assert!(!Template::parse("w.{source}", Kind::NatsSubject)
            .unwrap()
            .is_fixed());
    }
}
