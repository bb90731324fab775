//! Templates: which bytes a provider signed (`{timestamp}.{body}`), and what a handshake
//! answers (`{json:/challenge}`).

use super::definition::Location;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Literal(String),
    Body,
    Timestamp,
    Id,
    /// The URL the provider called: the source's `public_url` plus the request's query.
    Url,
    Method,
    /// Form parameters sorted by name, each as name then value (Twilio).
    FormParams,
    /// A header, body field or query parameter.
    Value(Location),
    /// HMAC-SHA256 of a value under the matching secret, lower-case hex (Zoom's handshake).
    HmacSha256Hex(Location),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<TemplatePart>);

/// What a template may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateKind {
    SignedPayload,
    HandshakeAnswer,
}

/// The values a template is rendered with.
pub struct RenderValues<'a> {
    pub body: &'a [u8],
    pub timestamp: Option<&'a str>,
    pub id: Option<&'a str>,
    pub url: Option<&'a str>,
    pub method: &'a str,
    pub form_params: Option<&'a [u8]>,
    pub lookup: &'a dyn Fn(&Location) -> Option<String>,
    pub hmac_sha256_hex: &'a dyn Fn(&[u8]) -> Option<String>,
}

impl Template {
    pub fn parse(s: &str, kind: TemplateKind) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| format!("has an unclosed '{{' in {s:?}"))?;
            let name = &after[..close];
            let part = parse_placeholder(name, kind)?;
            if !literal.is_empty() {
                parts.push(TemplatePart::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
            rest = &after[close + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(TemplatePart::Literal(literal));
        }
        Ok(Self(parts))
    }

    pub fn uses(&self, part: &TemplatePart) -> bool {
        self.0.contains(part)
    }

    pub fn parts(&self) -> &[TemplatePart] {
        &self.0
    }

    /// The locations the template reads.
    pub fn locations(&self) -> impl Iterator<Item = &Location> {
        self.0.iter().filter_map(|p| match p {
            TemplatePart::Value(l) | TemplatePart::HmacSha256Hex(l) => Some(l),
            _ => None,
        })
    }

    /// The exact bytes. `None` when a value the template needs is absent.
    pub fn render(&self, values: &RenderValues<'_>) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(values.body.len() + 64);
        for part in &self.0 {
            match part {
                TemplatePart::Literal(l) => out.extend_from_slice(l.as_bytes()),
                TemplatePart::Body => out.extend_from_slice(values.body),
                TemplatePart::Timestamp => out.extend_from_slice(values.timestamp?.as_bytes()),
                TemplatePart::Id => out.extend_from_slice(values.id?.as_bytes()),
                TemplatePart::Url => out.extend_from_slice(values.url?.as_bytes()),
                TemplatePart::Method => out.extend_from_slice(values.method.as_bytes()),
                TemplatePart::FormParams => out.extend_from_slice(values.form_params?),
                TemplatePart::Value(l) => out.extend_from_slice((values.lookup)(l)?.as_bytes()),
                TemplatePart::HmacSha256Hex(l) => {
                    let v = (values.lookup)(l)?;
                    out.extend_from_slice((values.hmac_sha256_hex)(v.as_bytes())?.as_bytes())
                }
            }
        }
        Some(out)
    }
}

fn parse_placeholder(name: &str, kind: TemplateKind) -> Result<TemplatePart, String> {
    let signed = kind == TemplateKind::SignedPayload;
    Ok(match name {
        "body" if signed => TemplatePart::Body,
        "timestamp" if signed => TemplatePart::Timestamp,
        "id" if signed => TemplatePart::Id,
        "url" if signed => TemplatePart::Url,
        "method" if signed => TemplatePart::Method,
        "form_params" if signed => TemplatePart::FormParams,
        _ => {
            if let Some(loc) = name.strip_prefix("hmac-sha256-hex:") {
                if signed {
                    return Err(format!("cannot use {{{name}}} in a signed payload"));
                }
                TemplatePart::HmacSha256Hex(Location::parse_plain(loc)?)
            } else if name.starts_with("header:")
                || name.starts_with("json:")
                || name.starts_with("query:")
                || name.starts_with("form:")
            {
                TemplatePart::Value(Location::parse_plain(name)?)
            } else if signed {
                return Err(format!(
                    "has unknown placeholder {{{name}}}; expected {{body}}, {{timestamp}}, {{id}}, {{url}}, {{method}}, {{form_params}}, {{header:Name}}, {{json:/pointer}} or {{query:name}}"
                ));
            } else {
                return Err(format!(
                    "has unknown placeholder {{{name}}}; expected {{json:/pointer}}, {{query:name}}, {{header:Name}} or {{hmac-sha256-hex:<location>}}"
                ));
            }
        }
    })
}

/// Twilio's signed form: parameters sorted by name, a repeated name's values sorted too, each
/// written as name then value with no separators.
pub fn sorted_form_params(body: &[u8]) -> Vec<u8> {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    let mut out = Vec::with_capacity(body.len());
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(lookup: &'a dyn Fn(&Location) -> Option<String>) -> RenderValues<'a> {
        RenderValues {
            body: b"{}",
            timestamp: Some("1"),
            id: Some("msg"),
            url: Some("https://h/p?q=1"),
            method: "POST",
            form_params: None,
            lookup,
            hmac_sha256_hex: &|_| None,
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let lookup = |l: &Location| match l {
            Location::Json(p) if p == "/t" => Some("tok".to_owned()),
            _ => None,
        };
        let t = Template::parse(
            "{id}.{timestamp}.{body}|{method}{url}|{json:/t}",
            TemplateKind::SignedPayload,
        )
        .unwrap();
        assert_eq!(
            t.render(&values(&lookup)).unwrap(),
            b"msg.1.{}|POSThttps://h/p?q=1|tok"
        );
        assert!(t.uses(&TemplatePart::Id) && t.uses(&TemplatePart::Timestamp));
        let missing = Template::parse("{json:/absent}", TemplateKind::SignedPayload).unwrap();
        assert!(missing.render(&values(&lookup)).is_none());
    }

    #[test]
    fn rejects_unknown_placeholders() {
        let s = TemplateKind::SignedPayload;
        assert!(Template::parse("{tiemstamp}.{body}", s).is_err());
        assert!(Template::parse("{body", s).is_err());
        assert!(Template::parse("{hmac-sha256-hex:json:/a}", s).is_err());
        assert!(Template::parse("{body}", TemplateKind::HandshakeAnswer).is_err());
    }

    #[test]
    fn form_params_are_sorted_by_name_then_value() {
        assert_eq!(
            sorted_form_params(b"To=%2B1&Digits=5678&Sid=CA1&Digits=1234"),
            b"Digits1234Digits5678SidCA1To+1"
        );
    }
}
