//! The verification typestate: only `Unverified::verify` produces a `Verified`.

use bytes::Bytes;

use super::handshake::HandshakeAnswer;
use crate::domain::ProviderEventId;

/// Request headers, names lower-cased, repeated headers kept with their values in arrival
/// order (the HTTP layer sorts the names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeaders(Vec<(String, String)>);

impl RequestHeaders {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, name: &str, value: impl Into<String>) {
        self.0.push((name.to_ascii_lowercase(), value.into()));
    }

    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value when the header appears exactly once.
    pub fn get_one(&self, name: &str) -> HeaderLookup<'_> {
        let mut values = self
            .0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str());
        match (values.next(), values.next()) {
            (None, _) => HeaderLookup::Absent,
            (Some(v), None) => HeaderLookup::One(v),
            (Some(_), Some(_)) => HeaderLookup::Repeated,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

impl<N: AsRef<str>, V: Into<String>> FromIterator<(N, V)> for RequestHeaders {
    fn from_iter<T: IntoIterator<Item = (N, V)>>(iter: T) -> Self {
        let mut h = Self::new();
        for (n, v) in iter {
            h.push(n.as_ref(), v);
        }
        h
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderLookup<'a> {
    Absent,
    One(&'a str),
    Repeated,
}

/// A request as it arrived. Its body has not been looked at.
#[derive(Debug)]
pub struct Unverified {
    pub(super) headers: RequestHeaders,
    pub(super) body: Bytes,
    pub(super) method: String,
    /// The raw query string, without the `?`.
    pub(super) query: String,
}

impl Unverified {
    /// A POST with no query string.
    pub fn new(headers: RequestHeaders, body: Bytes) -> Self {
        Self {
            headers,
            body,
            method: "POST".into(),
            query: String::new(),
        }
    }

    /// The method and raw query string the request came with: URL-signed schemes and
    /// handshakes read them.
    pub fn with_target(mut self, method: &str, query: &str) -> Self {
        self.method = method.to_ascii_uppercase();
        self.query = query.to_owned();
        self
    }

    pub fn headers(&self) -> &RequestHeaders {
        &self.headers
    }
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    pub fn method(&self) -> &str {
        &self.method
    }
    /// The raw query string, without the `?`.
    pub fn query(&self) -> &str {
        &self.query
    }
}

/// What verification turned the request into.
#[derive(Debug)]
pub enum Verified {
    Event(VerifiedEvent),
    /// A provider handshake: answer with this, store nothing.
    Challenge(HandshakeAnswer),
}

/// An authentic webhook with its dedupe key. Fields are private: no code path outside
/// `verify` can build one, so nothing unverified reaches the store.
#[derive(Debug)]
pub struct VerifiedEvent {
    pub(super) headers: RequestHeaders,
    pub(super) body: Bytes,
    pub(super) provider_event_id: ProviderEventId,
    pub(super) event_type: Option<String>,
    pub(super) scheme: String,
    pub(super) secret_index: usize,
}

impl VerifiedEvent {
    pub fn headers(&self) -> &RequestHeaders {
        &self.headers
    }
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    pub fn provider_event_id(&self) -> &ProviderEventId {
        &self.provider_event_id
    }
    pub fn event_type(&self) -> Option<&str> {
        self.event_type.as_deref()
    }
    /// The provider definition that verified it.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }
    /// Which of the source's secrets matched (0 = first listed), to see when an old one is unused.
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }
    pub fn content_type(&self) -> Option<&str> {
        self.headers.get_all("content-type").next()
    }
}
