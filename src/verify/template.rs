//! The signed-payload template: which bytes the provider signed, e.g. `{timestamp}.{body}`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    Body,
    Timestamp,
    Id,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Body,
    Timestamp,
    Id,
    Header(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadTemplate(Vec<Part>);

/// The values a template is rendered with.
pub struct PayloadValues<'a> {
    pub body: &'a [u8],
    pub timestamp: Option<&'a str>,
    pub id: Option<&'a str>,
    pub header: &'a dyn Fn(&str) -> Option<&'a str>,
}

impl PayloadTemplate {
    pub fn parse(s: &str) -> Result<Self, String> {
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
            let part = match name {
                "body" => Part::Body,
                "timestamp" => Part::Timestamp,
                "id" => Part::Id,
                _ => match name.strip_prefix("header:") {
                    Some(h) if !h.is_empty() => Part::Header(h.to_ascii_lowercase()),
                    _ => {
                        return Err(format!(
                            "has unknown placeholder {{{name}}}; expected {{body}}, {{timestamp}}, {{id}} or {{header:Name}}"
                        ))
                    }
                },
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
            rest = &after[close + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if !parts.contains(&Part::Body) {
            return Err("must contain {body}".into());
        }
        Ok(Self(parts))
    }

    pub fn uses(&self, segment: Segment) -> bool {
        self.0.iter().any(|p| {
            matches!(
                (p, segment),
                (Part::Body, Segment::Body)
                    | (Part::Timestamp, Segment::Timestamp)
                    | (Part::Id, Segment::Id)
            )
        })
    }

    /// The (lower-case) names of the headers the template reads.
    pub fn headers(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Part::Header(h) => Some(h.as_str()),
            _ => None,
        })
    }

    /// Renders the exact bytes to MAC. `None` when a value the template needs is absent.
    pub fn render(&self, values: &PayloadValues<'_>) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(values.body.len() + 64);
        for part in &self.0 {
            match part {
                Part::Literal(l) => out.extend_from_slice(l.as_bytes()),
                Part::Body => out.extend_from_slice(values.body),
                Part::Timestamp => out.extend_from_slice(values.timestamp?.as_bytes()),
                Part::Id => out.extend_from_slice(values.id?.as_bytes()),
                Part::Header(h) => out.extend_from_slice((values.header)(h)?.as_bytes()),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_standard_webhooks_template() {
        let t = PayloadTemplate::parse("{id}.{timestamp}.{body}").unwrap();
        let none = |_: &str| None;
        let v = PayloadValues {
            body: b"{}",
            timestamp: Some("1"),
            id: Some("msg"),
            header: &none,
        };
        assert_eq!(t.render(&v).unwrap(), b"msg.1.{}");
        assert!(t.uses(Segment::Id) && t.uses(Segment::Timestamp));
    }

    #[test]
    fn rejects_unknown_placeholders_and_missing_body() {
        assert!(PayloadTemplate::parse("{tiemstamp}.{body}").is_err());
        assert!(PayloadTemplate::parse("{timestamp}").is_err());
        assert!(PayloadTemplate::parse("{body").is_err());
    }
}
