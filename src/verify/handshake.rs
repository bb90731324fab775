//! Provider handshakes as data: a request that proves the URL works (Slack's
//! url_verification, Zoom's url_validation, Twitch's callback verification, Discord's PING,
//! Dropbox's and Meta's GET challenges, Microsoft Graph's validationToken) is answered as the
//! provider expects and never stored or delivered.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::definition::Location;
use super::template::{RenderValues, Template, TemplateKind};

/// The most an answer may hold. Unsigned handshakes echo what anyone sends; a challenge is
/// a short token for every provider, so a longer one is refused rather than reflected.
pub const MAX_ANSWER_BYTES: usize = 4096;

#[derive(Debug, Clone)]
pub struct HandshakeSpec {
    /// "GET" or "POST".
    pub method: String,
    /// Verified like an event (signature, timestamp) before it is answered.
    pub signed: bool,
    /// Each location must hold the value; `None`: present and not empty.
    pub when: Vec<(Location, Option<String>)>,
    /// Where the request carries a token that must equal the source's `verify_token`.
    pub verify_token: Option<Location>,
    pub answer: Answer,
}

#[derive(Debug, Clone)]
pub enum Answer {
    Text(Template),
    /// A JSON object: string values are templates, other values are sent as written.
    Json(Vec<(String, JsonField)>),
}

#[derive(Debug, Clone)]
pub enum JsonField {
    Template(Template),
    Literal(Value),
}

/// What a handshake is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeAnswer {
    pub content_type: &'static str,
    pub body: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHandshake {
    #[serde(default = "default_method")]
    method: String,
    #[serde(default = "default_signed")]
    signed: bool,
    when: BTreeMap<String, String>,
    verify_token: Option<String>,
    text: Option<String>,
    json: Option<toml::Table>,
}

fn default_method() -> String {
    "POST".into()
}
fn default_signed() -> bool {
    true
}

impl HandshakeSpec {
    /// The error is (key, problem) within the `[[handshake]]` table.
    pub(super) fn parse(raw: RawHandshake) -> Result<Self, (&'static str, String)> {
        let method = raw.method.to_ascii_uppercase();
        if method != "GET" && method != "POST" {
            return Err((
                "method",
                format!("is {:?}; expected GET or POST", raw.method),
            ));
        }
        if method == "GET" && raw.signed {
            return Err((
                "signed",
                "must be false for a GET handshake: it has no body to sign".into(),
            ));
        }
        if raw.when.is_empty() {
            return Err((
                "when",
                "is empty: a handshake must say how it is recognised".into(),
            ));
        }
        let when = raw
            .when
            .into_iter()
            .map(|(loc, value)| {
                let loc = Location::parse_plain(&loc).map_err(|p| ("when", p))?;
                Ok((loc, (value != "*").then_some(value)))
            })
            .collect::<Result<Vec<_>, (&'static str, String)>>()?;
        let verify_token = raw
            .verify_token
            .map(|l| Location::parse_plain(&l).map_err(|p| ("verify_token", p)))
            .transpose()?;
        let kind = TemplateKind::HandshakeAnswer;
        let answer = match (raw.text, raw.json) {
            (Some(text), None) => {
                Answer::Text(Template::parse(&text, kind).map_err(|p| ("text", p))?)
            }
            (None, Some(table)) => {
                let mut fields = Vec::new();
                for (key, value) in table {
                    let field = match value {
                        toml::Value::String(s) => {
                            JsonField::Template(Template::parse(&s, kind).map_err(|p| ("json", p))?)
                        }
                        other => JsonField::Literal(
                            serde_json::to_value(other).map_err(|e| ("json", e.to_string()))?,
                        ),
                    };
                    fields.push((key, field));
                }
                Answer::Json(fields)
            }
            _ => return Err(("text", "or `json` is required, and not both".into())),
        };
        if !raw.signed && answer_uses_hmac(&answer) {
            return Err((
                "json",
                "uses an HMAC of the request, which only a signed handshake may".into(),
            ));
        }
        Ok(Self {
            method,
            signed: raw.signed,
            when,
            verify_token,
            answer,
        })
    }

    /// Every location the handshake reads.
    pub fn locations(&self) -> impl Iterator<Item = &Location> {
        let answer: Vec<&Location> = match &self.answer {
            Answer::Text(t) => t.locations().collect(),
            Answer::Json(fields) => fields
                .iter()
                .filter_map(|(_, f)| match f {
                    JsonField::Template(t) => Some(t),
                    JsonField::Literal(_) => None,
                })
                .flat_map(|t| t.locations())
                .collect(),
        };
        self.when
            .iter()
            .map(|(l, _)| l)
            .chain(self.verify_token.as_ref())
            .chain(answer)
    }

    pub fn matches(&self, method: &str, lookup: &dyn Fn(&Location) -> Option<String>) -> bool {
        method.eq_ignore_ascii_case(&self.method)
            && self
                .when
                .iter()
                .all(|(loc, want)| match (lookup(loc), want) {
                    (Some(v), Some(want)) => &v == want,
                    (Some(v), None) => !v.is_empty(),
                    (None, _) => false,
                })
    }

    /// The answer, or `None` when a value it needs is missing or it would be too long.
    pub fn answer(&self, values: &RenderValues<'_>) -> Option<HandshakeAnswer> {
        let answer = match &self.answer {
            Answer::Text(t) => HandshakeAnswer {
                content_type: "text/plain; charset=utf-8",
                body: String::from_utf8(t.render(values)?).ok()?,
            },
            Answer::Json(fields) => {
                let mut map = serde_json::Map::new();
                for (key, field) in fields {
                    let value = match field {
                        JsonField::Template(t) => {
                            Value::String(String::from_utf8(t.render(values)?).ok()?)
                        }
                        JsonField::Literal(v) => v.clone(),
                    };
                    map.insert(key.clone(), value);
                }
                HandshakeAnswer {
                    content_type: "application/json",
                    body: Value::Object(map).to_string(),
                }
            }
        };
        (answer.body.len() <= MAX_ANSWER_BYTES).then_some(answer)
    }
}

fn answer_uses_hmac(answer: &Answer) -> bool {
    let uses = |t: &Template| {
        t.parts()
            .iter()
            .any(|p| matches!(p, super::template::TemplatePart::HmacSha256Hex(_)))
    };
    match answer {
        Answer::Text(t) => uses(t),
        Answer::Json(fields) => fields.iter().any(|(_, f)| match f {
            JsonField::Template(t) => uses(t),
            JsonField::Literal(_) => false,
        }),
    }
}
