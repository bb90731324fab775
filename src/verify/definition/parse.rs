//! Reading a definition file: serde structures as written, then every rule that makes a
//! definition usable, checked once at load time with the file and key named.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    Algorithm, Encoding, KeyEncoding, KeySpec, Location, ProviderDefinition, ResponseSpec,
    SignatureFormat, SignatureSource, SignatureSpec, TimestampFormat, TimestampSource,
    TimestampSpec,
};
use crate::verify::handshake::{HandshakeSpec, RawHandshake};
use crate::verify::template::{Template, TemplateKind, TemplatePart};

#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("provider definition {origin}: {source}")]
    Toml {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("provider definition {origin}: key `{key}` {problem}")]
    Invalid {
        origin: String,
        key: String,
        problem: String,
    },
    #[error("reading provider definitions from {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefinition {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    description: String,
    signature: RawSignature,
    #[serde(default)]
    secret: RawKey,
    public_key: Option<RawKey>,
    timestamp: Option<RawTimestamp>,
    event: RawEvent,
    response: Option<RawResponse>,
    #[serde(default)]
    handshake: Vec<RawHandshake>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignature {
    #[serde(default)]
    headers: Vec<String>,
    #[serde(default)]
    every_header: bool,
    body_pointer: Option<String>,
    #[serde(default = "default_format")]
    format: String,
    algorithm: Algorithm,
    encoding: Encoding,
    #[serde(default)]
    prefix: String,
    signed_payload: Option<String>,
    #[serde(default)]
    unsigned_body: bool,
    body_digest_query: Option<String>,
    pair_separator: Option<String>,
    kv_separator: Option<String>,
    #[serde(default)]
    signature_keys: Vec<String>,
    timestamp_key: Option<String>,
    list_separator: Option<String>,
    item_separator: Option<String>,
    #[serde(default)]
    versions: Vec<String>,
    #[serde(default)]
    version_algorithms: BTreeMap<String, Algorithm>,
}

fn default_format() -> String {
    "raw".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    #[serde(default = "default_key_encoding")]
    encoding: KeyEncoding,
    #[serde(default)]
    strip_prefix: String,
}

fn default_key_encoding() -> KeyEncoding {
    KeyEncoding::Utf8
}

impl Default for RawKey {
    fn default() -> Self {
        Self {
            encoding: KeyEncoding::Utf8,
            strip_prefix: String::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimestamp {
    /// "signature", or "header:Name" / "json:/pointer" locations.
    from: Vec<String>,
    #[serde(default = "default_timestamp_format")]
    format: TimestampFormat,
    tolerance_seconds: i64,
}

fn default_timestamp_format() -> TimestampFormat {
    TimestampFormat::Seconds
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    id: Vec<String>,
    #[serde(default, rename = "type")]
    event_type: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResponse {
    #[serde(default = "default_status")]
    status: u16,
    content_type: String,
    body: String,
}

fn default_status() -> u16 {
    200
}

/// Parses one definition. `origin` names the file in error messages.
pub fn parse_definition(origin: &str, text: &str) -> Result<ProviderDefinition, DefinitionError> {
    let raw: RawDefinition = toml::from_str(text).map_err(|source| DefinitionError::Toml {
        origin: origin.to_owned(),
        source,
    })?;
    let invalid = |key: &str, problem: String| DefinitionError::Invalid {
        origin: origin.to_owned(),
        key: key.to_owned(),
        problem,
    };
    if raw.name.is_empty() {
        return Err(invalid("name", "is empty".into()));
    }
    let signature = parse_signature(&raw.signature)
        .map_err(|(key, problem)| invalid(&format!("signature.{key}"), problem))?;

    let asymmetric: Vec<Algorithm> = signature
        .algorithms()
        .into_iter()
        .filter(|a| a.is_asymmetric())
        .collect();
    if asymmetric.len() > 1 {
        return Err(invalid(
            "signature.algorithm",
            "names two public-key algorithms; a definition verifies at most one".into(),
        ));
    }
    let public_key = raw.public_key.map(|k| KeySpec {
        encoding: k.encoding,
        strip_prefix: k.strip_prefix,
    });
    if !asymmetric.is_empty() && public_key.is_none() {
        return Err(invalid(
            "public_key",
            "is required: the signature is checked with a public key".into(),
        ));
    }
    if asymmetric.is_empty() && public_key.is_some() {
        return Err(invalid(
            "public_key",
            "is set but no algorithm uses a public key".into(),
        ));
    }

    let timestamp = raw
        .timestamp
        .as_ref()
        .map(|t| parse_timestamp(t, &signature.format))
        .transpose()
        .map_err(|(key, problem)| invalid(&format!("timestamp.{key}"), problem))?;
    if signature.uses(&TemplatePart::Timestamp) && timestamp.is_none() {
        return Err(invalid(
            "signature.signed_payload",
            "uses {timestamp} but there is no [timestamp] table".into(),
        ));
    }

    let event_id = parse_locations(&raw.event.id).map_err(|p| invalid("event.id", p))?;
    if event_id.is_empty() {
        return Err(invalid("event.id", "is empty".into()));
    }
    if event_id[..event_id.len() - 1].contains(&Location::Random) {
        return Err(invalid(
            "event.id",
            "has \"random\" before another location: it always yields an id, so it goes last"
                .into(),
        ));
    }
    if signature.uses(&TemplatePart::Id)
        && event_id.iter().any(|l| !matches!(l, Location::Header(_)))
    {
        return Err(invalid(
            "signature.signed_payload",
            "uses {id}, so event.id must come from headers only: the signed id is the stored one"
                .into(),
        ));
    }
    let event_type =
        parse_locations(&raw.event.event_type).map_err(|p| invalid("event.type", p))?;
    if event_type
        .iter()
        .any(|l| matches!(l, Location::Digest(_) | Location::Random))
    {
        return Err(invalid("event.type", "cannot be a digest or random".into()));
    }

    let response = match raw.response {
        None => None,
        Some(r) => {
            if !(200..300).contains(&r.status) {
                return Err(invalid(
                    "response.status",
                    "must be a 2xx status: it answers an accepted event".into(),
                ));
            }
            Some(ResponseSpec {
                status: r.status,
                content_type: r.content_type,
                body: r.body,
            })
        }
    };
    let handshakes = raw
        .handshake
        .into_iter()
        .map(HandshakeSpec::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|(key, problem)| invalid(&format!("handshake.{key}"), problem))?;

    let mut def = ProviderDefinition {
        name: raw.name,
        aliases: raw.aliases,
        description: raw.description,
        signature,
        secret: KeySpec {
            encoding: raw.secret.encoding,
            strip_prefix: raw.secret.strip_prefix,
        },
        public_key,
        timestamp,
        event_id,
        event_type,
        response,
        handshakes,
        body_pointers: Vec::new(),
    };
    def.collect_body_pointers();
    Ok(def)
}

type Problem = (&'static str, String);

fn parse_signature(s: &RawSignature) -> Result<SignatureSpec, Problem> {
    let source = match (&s.body_pointer, s.headers.is_empty()) {
        (None, false) => SignatureSource::Headers {
            names: s.headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            every: s.every_header,
        },
        (Some(p), true) if p.starts_with('/') && !s.every_header => {
            SignatureSource::Body(p.clone())
        }
        (Some(p), true) if !p.starts_with('/') => {
            return Err((
                "body_pointer",
                format!("is {p:?}, which must start with '/'"),
            ))
        }
        (None, true) => return Err(("headers", "is empty (or set body_pointer)".into())),
        _ => {
            return Err((
                "headers",
                "and body_pointer are exclusive (and every_header needs headers)".into(),
            ))
        }
    };
    let need = |key: &'static str, v: &Option<String>| -> Result<String, Problem> {
        match v {
            Some(v) if !v.is_empty() => Ok(v.clone()),
            _ => Err((key, format!("is required when format = {:?}", s.format))),
        }
    };
    let format = match s.format.as_str() {
        "raw" => SignatureFormat::Raw,
        "kv" => {
            if s.signature_keys.is_empty() {
                return Err(("signature_keys", "is required when format = \"kv\"".into()));
            }
            SignatureFormat::KeyValue {
                pair_separator: need("pair_separator", &s.pair_separator)?,
                kv_separator: need("kv_separator", &s.kv_separator)?,
                signature_keys: s.signature_keys.clone(),
                timestamp_key: s.timestamp_key.clone(),
            }
        }
        "list" => {
            if s.versions.is_empty() {
                return Err(("versions", "is required when format = \"list\"".into()));
            }
            if let Some(v) = s
                .version_algorithms
                .keys()
                .find(|v| !s.versions.contains(v))
            {
                return Err((
                    "version_algorithms",
                    format!("names {v:?}, which is not in versions"),
                ));
            }
            SignatureFormat::List {
                list_separator: need("list_separator", &s.list_separator)?,
                item_separator: need("item_separator", &s.item_separator)?,
                versions: s
                    .versions
                    .iter()
                    .map(|v| {
                        (
                            v.clone(),
                            *s.version_algorithms.get(v).unwrap_or(&s.algorithm),
                        )
                    })
                    .collect(),
            }
        }
        other => {
            return Err((
                "format",
                format!("is {other:?}; expected \"raw\", \"kv\" or \"list\""),
            ))
        }
    };
    let token = s.algorithm == Algorithm::Token;
    if s.encoding == Encoding::Text && !token {
        return Err((
            "encoding",
            "\"text\" is for algorithm = \"token\" only".into(),
        ));
    }
    let payload = match (&s.signed_payload, token) {
        (Some(_), true) => {
            return Err((
                "signed_payload",
                "does not apply to a token: it signs nothing".into(),
            ))
        }
        (None, true) => None,
        (text, false) => Some(
            Template::parse(
                text.as_deref().unwrap_or("{body}"),
                TemplateKind::SignedPayload,
            )
            .map_err(|p| ("signed_payload", p))?,
        ),
    };
    if let Some(t) = &payload {
        let covers_body = t.uses(&TemplatePart::Body) || t.uses(&TemplatePart::FormParams);
        match (covers_body, s.unsigned_body) {
            (false, false) => {
                return Err((
                    "signed_payload",
                    "must contain {body} or {form_params}, or set unsigned_body = true where the provider signs no body".into(),
                ))
            }
            (true, true) => {
                return Err(("unsigned_body", "is true but signed_payload covers the body".into()))
            }
            _ => {}
        }
    }
    let body_digest_query = s.body_digest_query.clone().filter(|q| !q.is_empty());
    if body_digest_query.is_some()
        && !payload
            .as_ref()
            .is_some_and(|t| t.uses(&TemplatePart::FormParams))
    {
        return Err((
            "body_digest_query",
            "needs {form_params} in signed_payload".into(),
        ));
    }
    Ok(SignatureSpec {
        source,
        format,
        prefix: s.prefix.clone(),
        algorithm: s.algorithm,
        encoding: s.encoding,
        payload,
        unsigned_body: s.unsigned_body,
        body_digest_query,
    })
}

fn parse_timestamp(t: &RawTimestamp, format: &SignatureFormat) -> Result<TimestampSpec, Problem> {
    if t.tolerance_seconds <= 0 {
        return Err(("tolerance_seconds", "must be positive".into()));
    }
    let source = if t.from == ["signature"] {
        match format {
            SignatureFormat::KeyValue {
                timestamp_key: Some(_),
                ..
            } => TimestampSource::Signature,
            _ => {
                return Err((
                    "from",
                    "is \"signature\" but the signature format has no timestamp_key".into(),
                ))
            }
        }
    } else {
        let mut locations = Vec::new();
        for loc in &t.from {
            match Location::parse_plain(loc) {
                Ok(l @ (Location::Header(_) | Location::Json(_))) => locations.push(l),
                _ => {
                    return Err((
                        "from",
                        format!("has {loc:?}; expected \"signature\", \"header:<Name>\" or \"json:/pointer\""),
                    ))
                }
            }
        }
        if locations.is_empty() {
            return Err(("from", "is empty".into()));
        }
        TimestampSource::Locations(locations)
    };
    Ok(TimestampSpec {
        source,
        format: t.format,
        tolerance_seconds: t.tolerance_seconds,
    })
}

fn parse_locations(items: &[String]) -> Result<Vec<Location>, String> {
    items.iter().map(|s| Location::parse(s)).collect()
}
