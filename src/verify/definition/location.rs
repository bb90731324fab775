//! Where a value (event id, type, timestamp, a signed field) is read from.

/// A place in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A header, name lower-cased.
    Header(String),
    /// A JSON pointer (RFC 6901) into the body.
    Json(String),
    /// A query parameter of the URL the request came to.
    Query(String),
    /// A parameter of a form-encoded body (Twilio's `MessageStatus`, WooCommerce's ping).
    Form(String),
    /// `sha256:body` (no fields) or `sha256:json:/a,header:B`: a digest standing in for an
    /// id the provider does not send, so a retried identical request is still a duplicate.
    Digest(Vec<Location>),
    /// `random`: a fresh id for every request, for notify-then-fetch providers whose
    /// identical notifications are distinct events (Dropbox, Microsoft Graph). A retry is then
    /// stored and delivered again, which a consumer that fetches the state absorbs; a digest
    /// would instead drop a later, identical notification of a new change.
    Random,
}

impl Location {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "random" {
            return Ok(Self::Random);
        }
        if let Some(rest) = s.strip_prefix("sha256:") {
            if rest == "body" {
                return Ok(Self::Digest(Vec::new()));
            }
            let fields = rest
                .split(',')
                .map(Self::parse_plain)
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Self::Digest(fields));
        }
        Self::parse_plain(s)
    }

    /// A location that names one value (not a digest).
    pub fn parse_plain(s: &str) -> Result<Self, String> {
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
        } else if let Some(name) = s.strip_prefix("query:") {
            if name.is_empty() {
                return Err("names an empty query parameter".into());
            }
            Ok(Self::Query(name.to_owned()))
        } else if let Some(name) = s.strip_prefix("form:") {
            if name.is_empty() {
                return Err("names an empty form parameter".into());
            }
            Ok(Self::Form(name.to_owned()))
        } else {
            Err(format!(
                "has location {s:?}; expected \"header:<Name>\", \"json:/pointer\", \"query:<name>\", \"form:<name>\", \"sha256:body\", \"sha256:<locations>\" or \"random\""
            ))
        }
    }

    /// The body fields this location reads.
    pub(crate) fn json_pointers(&self, out: &mut Vec<String>) {
        match self {
            Self::Json(p) => out.push(p.clone()),
            Self::Digest(fields) => fields.iter().for_each(|f| f.json_pointers(out)),
            Self::Header(_) | Self::Query(_) | Self::Form(_) | Self::Random => {}
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Header(h) => format!("header {h}"),
            Self::Json(p) => format!("body field {p}"),
            Self::Query(q) => format!("query parameter {q}"),
            Self::Form(n) => format!("form parameter {n}"),
            Self::Random => "a random id".into(),
            Self::Digest(f) if f.is_empty() => "a digest of the body".into(),
            Self::Digest(f) => format!(
                "a digest of {}",
                f.iter().map(Self::describe).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The location as a definition writes it.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(h) => write!(f, "header:{h}"),
            Self::Json(p) => write!(f, "json:{p}"),
            Self::Query(q) => write!(f, "query:{q}"),
            Self::Form(n) => write!(f, "form:{n}"),
            Self::Random => f.write_str("random"),
            Self::Digest(fields) if fields.is_empty() => f.write_str("sha256:body"),
            Self::Digest(fields) => {
                f.write_str("sha256:")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{field}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        assert_eq!(
            Location::parse("header:X-Id"),
            Ok(Location::Header("x-id".into()))
        );
        assert_eq!(
            Location::parse("json:/a/0"),
            Ok(Location::Json("/a/0".into()))
        );
        assert_eq!(
            Location::parse("query:challenge"),
            Ok(Location::Query("challenge".into()))
        );
        assert_eq!(Location::parse("sha256:body"), Ok(Location::Digest(vec![])));
        assert_eq!(
            Location::parse("sha256:json:/a,header:B"),
            Ok(Location::Digest(vec![
                Location::Json("/a".into()),
                Location::Header("b".into())
            ]))
        );
        for bad in [
            "id",
            "json:a",
            "header:",
            "sha256:",
            "sha256:sha256:body",
            "query:",
        ] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }
}
