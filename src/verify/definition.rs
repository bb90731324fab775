//! The provider definition format (`providers/*.toml`), parsed once into validated types.
//! See docs/PROVIDERS.md for the format with examples.

use serde::Deserialize;

use super::template::{PayloadTemplate, Segment};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
    HmacSha512,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Hex,
    Base64,
}

impl Encoding {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hex" => Some(Self::Hex),
            "base64" => Some(Self::Base64),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretEncoding {
    Utf8,
    Base64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeKind {
    SlackUrlVerification,
}

/// How the signature header is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureFormat {
    /// The whole value is one signature, after an optional prefix (`sha256=`).
    Raw { prefix: String },
    /// `t=1,v1=abc,v1=def`: pairs, some of which hold signatures and one the timestamp.
    KeyValue {
        pair_separator: String,
        kv_separator: String,
        signature_keys: Vec<String>,
        timestamp_key: Option<String>,
    },
    /// `v1,abc v1,def`: a list of `version<sep>signature` items; unknown versions are skipped.
    List {
        list_separator: String,
        item_separator: String,
        versions: Vec<String>,
    },
}

/// Where a value (event id, type, timestamp) is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Header(String),
    /// A JSON pointer (RFC 6901) into the body.
    Json(String),
}

impl Location {
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("header:") {
            if name.is_empty() {
                return Err("names an empty header".into());
            }
            Ok(Self::Header(name.to_ascii_lowercase()))
        } else if let Some(pointer) = s.strip_prefix("json:") {
            if !pointer.starts_with('/') {
                return Err(format!(
                    "has JSON pointer {pointer:?}, which must start with '/'"
                ));
            }
            Ok(Self::Json(pointer.to_owned()))
        } else {
            Err(format!(
                "has location {s:?}; expected \"header:<Name>\" or \"json:/pointer\""
            ))
        }
    }
}

#[derive(Debug, Clone)]
pub struct SignatureSpec {
    /// Candidate header names, lower-case; the first one present is used.
    pub headers: Vec<String>,
    pub format: SignatureFormat,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    pub payload: PayloadTemplate,
}

#[derive(Debug, Clone)]
pub enum TimestampSource {
    /// The timestamp is a field of the signature header (`t=` in Stripe's).
    Signature,
    Headers(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct TimestampSpec {
    pub source: TimestampSource,
    pub tolerance_seconds: i64,
}

#[derive(Debug, Clone)]
pub struct SecretSpec {
    pub encoding: SecretEncoding,
    pub strip_prefix: String,
}

#[derive(Debug, Clone)]
pub struct ProviderDefinition {
    pub name: String,
    pub aliases: Vec<String>,
    pub signature: SignatureSpec,
    pub secret: SecretSpec,
    pub timestamp: Option<TimestampSpec>,
    pub event_id: Vec<Location>,
    pub event_type: Vec<Location>,
    pub challenge: Option<ChallengeKind>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefinition {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    signature: RawSignature,
    #[serde(default)]
    secret: RawSecret,
    timestamp: Option<RawTimestamp>,
    event: RawEvent,
    challenge: Option<ChallengeKind>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignature {
    headers: Vec<String>,
    #[serde(default = "default_format")]
    format: String,
    algorithm: Algorithm,
    encoding: Encoding,
    #[serde(default)]
    prefix: String,
    #[serde(default = "default_payload")]
    signed_payload: String,
    pair_separator: Option<String>,
    kv_separator: Option<String>,
    #[serde(default)]
    signature_keys: Vec<String>,
    timestamp_key: Option<String>,
    list_separator: Option<String>,
    item_separator: Option<String>,
    #[serde(default)]
    versions: Vec<String>,
}

fn default_format() -> String {
    "raw".into()
}

fn default_payload() -> String {
    "{body}".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    #[serde(default = "default_secret_encoding")]
    encoding: SecretEncoding,
    #[serde(default)]
    strip_prefix: String,
}

fn default_secret_encoding() -> SecretEncoding {
    SecretEncoding::Utf8
}

impl Default for RawSecret {
    fn default() -> Self {
        Self {
            encoding: SecretEncoding::Utf8,
            strip_prefix: String::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimestamp {
    /// "signature" or a list of "header:Name".
    from: Vec<String>,
    tolerance_seconds: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    id: Vec<String>,
    #[serde(default, rename = "type")]
    event_type: Vec<String>,
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
    if raw.signature.headers.is_empty() {
        return Err(invalid("signature.headers", "is empty".into()));
    }
    let s = &raw.signature;
    let need = |key: &str, v: &Option<String>| -> Result<String, DefinitionError> {
        match v {
            Some(v) if !v.is_empty() => Ok(v.clone()),
            _ => Err(invalid(
                &format!("signature.{key}"),
                format!("is required when format = {:?}", s.format),
            )),
        }
    };
    let format = match s.format.as_str() {
        "raw" => SignatureFormat::Raw {
            prefix: s.prefix.clone(),
        },
        "kv" => {
            if s.signature_keys.is_empty() {
                return Err(invalid(
                    "signature.signature_keys",
                    "is required when format = \"kv\"".into(),
                ));
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
                return Err(invalid(
                    "signature.versions",
                    "is required when format = \"list\"".into(),
                ));
            }
            SignatureFormat::List {
                list_separator: need("list_separator", &s.list_separator)?,
                item_separator: need("item_separator", &s.item_separator)?,
                versions: s.versions.clone(),
            }
        }
        other => {
            return Err(invalid(
                "signature.format",
                format!("is {other:?}; expected \"raw\", \"kv\" or \"list\""),
            ))
        }
    };
    let payload = PayloadTemplate::parse(&s.signed_payload)
        .map_err(|problem| invalid("signature.signed_payload", problem))?;

    let timestamp = match &raw.timestamp {
        None => None,
        Some(t) => {
            if t.tolerance_seconds <= 0 {
                return Err(invalid(
                    "timestamp.tolerance_seconds",
                    "must be positive".into(),
                ));
            }
            let source = if t.from == ["signature"] {
                match &format {
                    SignatureFormat::KeyValue {
                        timestamp_key: Some(_),
                        ..
                    } => TimestampSource::Signature,
                    _ => {
                        return Err(invalid(
                            "timestamp.from",
                            "is \"signature\" but the signature format has no timestamp_key".into(),
                        ))
                    }
                }
            } else {
                let mut headers = Vec::new();
                for loc in &t.from {
                    match Location::parse(loc) {
                        Ok(Location::Header(h)) => headers.push(h),
                        _ => {
                            return Err(invalid(
                                "timestamp.from",
                                format!("has {loc:?}; expected \"signature\" or \"header:<Name>\""),
                            ))
                        }
                    }
                }
                if headers.is_empty() {
                    return Err(invalid("timestamp.from", "is empty".into()));
                }
                TimestampSource::Headers(headers)
            };
            Some(TimestampSpec {
                source,
                tolerance_seconds: t.tolerance_seconds,
            })
        }
    };
    if payload.uses(Segment::Timestamp) && timestamp.is_none() {
        return Err(invalid(
            "signature.signed_payload",
            "uses {timestamp} but there is no [timestamp] table".into(),
        ));
    }

    let event_id = parse_locations(&raw.event.id).map_err(|p| invalid("event.id", p))?;
    if event_id.is_empty() {
        return Err(invalid("event.id", "is empty".into()));
    }
    if payload.uses(Segment::Id) && event_id.iter().any(|l| matches!(l, Location::Json(_))) {
        return Err(invalid(
            "signature.signed_payload",
            "uses {id}, so event.id must come from headers: the body is not parsed before verification".into(),
        ));
    }
    let event_type =
        parse_locations(&raw.event.event_type).map_err(|p| invalid("event.type", p))?;

    Ok(ProviderDefinition {
        name: raw.name,
        aliases: raw.aliases,
        signature: SignatureSpec {
            headers: s.headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            format,
            algorithm: s.algorithm,
            encoding: s.encoding,
            payload,
        },
        secret: SecretSpec {
            encoding: raw.secret.encoding,
            strip_prefix: raw.secret.strip_prefix,
        },
        timestamp,
        event_id,
        event_type,
        challenge: raw.challenge,
    })
}

fn parse_locations(items: &[String]) -> Result<Vec<Location>, String> {
    items.iter().map(|s| Location::parse(s)).collect()
}

/// Per-source settings that adjust a definition (used by the generic `hmac-sha256` provider).
#[derive(Debug, Clone, Default)]
pub struct SourceOverrides {
    pub signature_header: Option<String>,
    pub signature_encoding: Option<String>,
    pub signature_prefix: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
}

impl ProviderDefinition {
    /// Applies a source's overrides. The error names the offending source key.
    pub fn with_overrides(
        &self,
        overrides: &SourceOverrides,
    ) -> Result<ProviderDefinition, (&'static str, String)> {
        let mut def = self.clone();
        if let Some(h) = &overrides.signature_header {
            if h.is_empty() {
                return Err(("signature_header", "is empty".into()));
            }
            def.signature.headers = vec![h.to_ascii_lowercase()];
        }
        if let Some(e) = &overrides.signature_encoding {
            def.signature.encoding = Encoding::parse(e).ok_or((
                "signature_encoding",
                format!("is {e:?}; expected \"hex\" or \"base64\""),
            ))?;
        }
        if let Some(p) = &overrides.signature_prefix {
            match &mut def.signature.format {
                SignatureFormat::Raw { prefix } => *prefix = p.clone(),
                _ => {
                    return Err((
                        "signature_prefix",
                        format!("applies only to raw signatures, not provider {}", self.name),
                    ))
                }
            }
        }
        if let Some(id) = &overrides.event_id {
            def.event_id = vec![Location::parse(id).map_err(|p| ("event_id", p))?];
            if def.signature.payload.uses(Segment::Id)
                && matches!(def.event_id[0], Location::Json(_))
            {
                return Err((
                    "event_id",
                    "must be a header: this provider signs the id".into(),
                ));
            }
        }
        if let Some(t) = &overrides.event_type {
            def.event_type = vec![Location::parse(t).map_err(|p| ("event_type", p))?];
        }
        Ok(def)
    }
}
