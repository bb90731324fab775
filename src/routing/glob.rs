//! Event-type patterns: `invoice.paid`, `invoice.*`, `*.succeeded`. `*` stands for any run of
//! characters, the empty one included; every other character, `.` and `?` among them, is
//! literal, so an event type never needs escaping.

use std::fmt;

/// A parsed event-type pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTypePattern {
    source: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// No `*`: the event type equals the pattern.
    Exact,
    /// The literal runs between the stars: the first is a prefix, the last a suffix, and
    /// the ones between follow in order.
    Glob(Vec<String>),
}

impl EventTypePattern {
    /// Parses a pattern; the empty pattern, which no event type could mean, is refused.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("an event type pattern must not be empty".to_owned());
        }
        let kind = if pattern.contains('*') {
            Kind::Glob(pattern.split('*').map(str::to_owned).collect())
        } else {
            Kind::Exact
        };
        Ok(Self {
            source: pattern.to_owned(),
            kind,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether an event type matches. Each literal run is found at its leftmost place after
    /// the one before: a later place never leaves more room for the runs that follow, so
    /// the first fit is the answer and matching takes no backtracking.
    pub fn matches(&self, event_type: &str) -> bool {
        let runs = match &self.kind {
            Kind::Exact => return event_type == self.source,
            Kind::Glob(runs) => runs,
        };
        // `split('*')` on a string with a `*` yields at least two runs.
        let (Some((first, rest)), Some(last)) = (runs.split_first(), runs.last()) else {
            return false;
        };
        let Some(mut remaining) = event_type.strip_prefix(first.as_str()) else {
            return false;
        };
        for middle in &rest[..rest.len().saturating_sub(1)] {
            match remaining.find(middle.as_str()) {
                Some(at) => remaining = &remaining[at + middle.len()..],
                None => return false,
            }
        }
        remaining.ends_with(last.as_str())
    }
}

impl fmt::Display for EventTypePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, event_type: &str) -> bool {
        EventTypePattern::parse(pattern)
            .unwrap()
            .matches(event_type)
    }

    #[test]
    fn an_exact_pattern_matches_only_itself() {
        assert!(matches("invoice.paid", "invoice.paid"));
        assert!(!matches("invoice.paid", "invoice.paid2"));
        assert!(!matches("invoice.paid", "Invoice.paid"));
        assert!(!matches("invoice.paid", ""));
    }

    #[test]
    fn a_star_matches_any_run_including_the_empty_one() {
        assert!(matches("invoice.*", "invoice.paid"));
        assert!(matches("invoice.*", "invoice."));
        assert!(matches("invoice.*", "invoice.payment.failed"));
        assert!(!matches("invoice.*", "invoice"));
        assert!(!matches("invoice.*", "customer.invoice.paid"));
        assert!(matches("*.succeeded", "payment_intent.succeeded"));
        assert!(matches("*.succeeded", ".succeeded"));
        assert!(!matches("*.succeeded", "payment_intent.succeeded.late"));
        assert!(matches("*", ""));
        assert!(matches("*", "anything at all"));
        assert!(matches("**", "x"));
    }

    #[test]
    fn runs_between_stars_follow_in_order_without_overlapping() {
        assert!(matches("a*b*c", "abc"));
        assert!(matches("a*b*c", "a-b-b-c"));
        assert!(!matches("a*b*c", "acb"));
        assert!(matches("*.payment.*", "invoice.payment.failed"));
        assert!(!matches("*.payment.*", "invoice.payment"));
        // The prefix and the suffix may not share characters.
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("ab*ba", "abba"));
        assert!(!matches("a*a*a", "aa"));
        assert!(matches("a*a*a", "aaa"));
    }

    #[test]
    fn other_characters_are_literal() {
        assert!(matches("a?b", "a?b"));
        assert!(!matches("a?b", "axb"));
        assert!(matches("[x].*", "[x].y"));
        assert!(!matches("a.b", "axb"));
        assert!(matches("é*ü", "é-ü"));
    }

    #[test]
    fn the_empty_pattern_is_refused() {
        assert!(EventTypePattern::parse("").is_err());
    }

    #[test]
    fn a_pattern_reads_back_as_written() {
        let p = EventTypePattern::parse("invoice.*").unwrap();
        assert_eq!(p.as_str(), "invoice.*");
        assert_eq!(p.to_string(), "invoice.*");
    }
}
