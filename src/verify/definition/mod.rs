//! The provider definition format (`providers/*.toml`), parsed once into validated types.
//! See docs/PROVIDERS.md for the format with examples.

mod location;
mod parse;

pub use location::Location;
pub use parse::{parse_definition, DefinitionError};

use super::handshake::HandshakeSpec;
use super::template::{Template, TemplatePart};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
    HmacSha512,
    Ed25519,
    EcdsaP256Sha256,
    /// The value sent is the secret itself (GitLab's token, basic auth, Graph's clientState).
    Token,
}

impl Algorithm {
    /// The name a definition writes.
    pub fn name(self) -> &'static str {
        match self {
            Self::HmacSha1 => "hmac-sha1",
            Self::HmacSha256 => "hmac-sha256",
            Self::HmacSha512 => "hmac-sha512",
            Self::Ed25519 => "ed25519",
            Self::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Self::Token => "token",
        }
    }

    pub fn is_asymmetric(self) -> bool {
        matches!(self, Self::Ed25519 | Self::EcdsaP256Sha256)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Hex,
    Base64,
    /// The value as sent (tokens only).
    Text,
}

impl Encoding {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hex" => Some(Self::Hex),
            "base64" => Some(Self::Base64),
            "text" => Some(Self::Text),
            _ => None,
        }
    }
}

/// How a configured secret or public key is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyEncoding {
    Utf8,
    Base64,
    Hex,
}

#[derive(Debug, Clone)]
pub struct KeySpec {
    pub encoding: KeyEncoding,
    pub strip_prefix: String,
}

/// How the signature value is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureFormat {
    /// The whole value is one signature.
    Raw,
    /// `t=1,v1=abc,v1=def`: pairs, some of which hold signatures and one the timestamp.
    KeyValue {
        pair_separator: String,
        kv_separator: String,
        signature_keys: Vec<String>,
        timestamp_key: Option<String>,
    },
    /// `v1,abc v1a,def`: `version<sep>signature` items, each version with its algorithm;
    /// unknown versions are skipped.
    List {
        list_separator: String,
        item_separator: String,
        versions: Vec<(String, Algorithm)>,
    },
}

/// Where the signature is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureSource {
    /// Candidate header names, lower-case. `every`: read all of them that are present (Box
    /// sends a primary and a secondary signature); otherwise the first present.
    Headers { names: Vec<String>, every: bool },
    /// A JSON pointer into the body. A `*` segment stands for every element of an array,
    /// and then every value found must verify (Microsoft Graph's batched notifications).
    Body(String),
}

#[derive(Debug, Clone)]
pub struct SignatureSpec {
    pub source: SignatureSource,
    pub format: SignatureFormat,
    /// Stripped from every signature value; a value without it is not a candidate.
    pub prefix: String,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    /// The signed bytes; `None` for tokens, which sign nothing.
    pub payload: Option<Template>,
    /// The signature does not cover the body (Mailgun signs a timestamp and a token).
    pub unsigned_body: bool,
    /// A query parameter carrying the hex SHA-256 of the body (Twilio's JSON requests).
    pub body_digest_query: Option<String>,
}

impl SignatureSpec {
    pub fn headers(&self) -> &[String] {
        match &self.source {
            SignatureSource::Headers { names, .. } => names,
            SignatureSource::Body(_) => &[],
        }
    }

    /// Every algorithm a signature may use: the definition's, and per-version ones.
    pub fn algorithms(&self) -> Vec<Algorithm> {
        let mut all = vec![self.algorithm];
        if let SignatureFormat::List { versions, .. } = &self.format {
            all.extend(versions.iter().map(|(_, a)| *a));
        }
        all.sort_by_key(|a| *a as u8);
        all.dedup();
        all
    }

    pub fn uses(&self, part: &TemplatePart) -> bool {
        self.payload.as_ref().is_some_and(|t| t.uses(part))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimestampFormat {
    Seconds,
    Milliseconds,
    Rfc3339,
}

#[derive(Debug, Clone)]
pub enum TimestampSource {
    /// The timestamp is a field of the signature header (`t=` in Stripe's).
    Signature,
    /// Headers or body fields, the first present used.
    Locations(Vec<Location>),
}

#[derive(Debug, Clone)]
pub struct TimestampSpec {
    pub source: TimestampSource,
    pub format: TimestampFormat,
    pub tolerance_seconds: i64,
}

/// The answer to an accepted or duplicate event, when the provider needs a particular one.
#[derive(Debug, Clone)]
pub struct ResponseSpec {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

#[derive(Debug, Clone)]
pub struct ProviderDefinition {
    pub name: String,
    pub aliases: Vec<String>,
    pub description: String,
    pub signature: SignatureSpec,
    pub secret: KeySpec,
    /// How public keys are written, for definitions with an asymmetric algorithm.
    pub public_key: Option<KeySpec>,
    pub timestamp: Option<TimestampSpec>,
    pub event_id: Vec<Location>,
    pub event_type: Vec<Location>,
    pub response: Option<ResponseSpec>,
    pub handshakes: Vec<HandshakeSpec>,
    /// Every body field the definition reads (ids, types, timestamps, signed fields,
    /// handshakes), so one pass over a body finds them all.
    pub(crate) body_pointers: Vec<String>,
}

impl ProviderDefinition {
    /// The public-key algorithm this definition verifies, if any (at most one).
    pub fn asymmetric_algorithm(&self) -> Option<Algorithm> {
        self.signature
            .algorithms()
            .into_iter()
            .find(|a| a.is_asymmetric())
    }

    /// Whether configured secrets (not only public keys) are used.
    pub fn takes_secrets(&self) -> bool {
        self.signature
            .algorithms()
            .iter()
            .any(|a| !a.is_asymmetric())
    }

    /// A source must say where the provider calls it (`public_url`) when the URL is signed.
    pub fn needs_public_url(&self) -> bool {
        self.signature.uses(&TemplatePart::Url)
    }

    /// A source must hold a `verify_token` when a handshake checks one (Meta).
    pub fn needs_verify_token(&self) -> bool {
        self.handshakes.iter().any(|h| h.verify_token.is_some())
    }

    /// Whether webhook URLs of this provider answer GET (Dropbox, Meta).
    pub fn answers_get(&self) -> bool {
        self.handshakes.iter().any(|h| h.method == "GET")
    }

    fn collect_body_pointers(&mut self) {
        let mut pointers = Vec::new();
        let mut add = |loc: &Location| loc.json_pointers(&mut pointers);
        self.event_id.iter().for_each(&mut add);
        self.event_type.iter().for_each(&mut add);
        if let Some(TimestampSpec {
            source: TimestampSource::Locations(locs),
            ..
        }) = &self.timestamp
        {
            locs.iter().for_each(&mut add);
        }
        if let Some(t) = &self.signature.payload {
            t.locations().for_each(&mut add);
        }
        for h in &self.handshakes {
            h.locations().for_each(&mut add);
        }
        if let SignatureSource::Body(p) = &self.signature.source {
            pointers.push(p.clone());
        }
        pointers.sort();
        pointers.dedup();
        self.body_pointers = pointers;
    }
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
            match &mut def.signature.source {
                SignatureSource::Headers { names, .. } => *names = vec![h.to_ascii_lowercase()],
                SignatureSource::Body(_) => {
                    return Err((
                        "signature_header",
                        format!("does not apply: provider {} signs in the body", self.name),
                    ))
                }
            }
        }
        if let Some(e) = &overrides.signature_encoding {
            def.signature.encoding = match Encoding::parse(e) {
                Some(Encoding::Text) if def.signature.algorithm != Algorithm::Token => None,
                other => other,
            }
            .ok_or((
                "signature_encoding",
                format!("is {e:?}; expected \"hex\" or \"base64\""),
            ))?;
        }
        if let Some(p) = &overrides.signature_prefix {
            def.signature.prefix = p.clone();
        }
        let signs_id = def.signature.uses(&TemplatePart::Id);
        if let Some(id) = &overrides.event_id {
            def.event_id = vec![Location::parse(id).map_err(|p| ("event_id", p))?];
            if signs_id && !matches!(def.event_id[0], Location::Header(_)) {
                return Err((
                    "event_id",
                    "must be a header: this provider signs the id".into(),
                ));
            }
        }
        if let Some(t) = &overrides.event_type {
            let loc = Location::parse(t).map_err(|p| ("event_type", p))?;
            if matches!(loc, Location::Digest(_) | Location::Random) {
                return Err(("event_type", "cannot be a digest or random".into()));
            }
            def.event_type = vec![loc];
        }
        def.collect_body_pointers();
        Ok(def)
    }
}
