//! Compiling a filter: every key checked, every operator's argument checked against what the
//! operator takes, and the whole bounded in depth and size, so that an error names its path
//! when the configuration is loaded and matching has nothing left to check.

use serde_json::{Map, Value};

use super::filter::{Cmp, FilterError, Node, Op, MAX_FILTER_DEPTH, MAX_FILTER_NODES};

const OPERATORS: [&str; 14] = [
    "$eq",
    "$neq",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$startsWith",
    "$endsWith",
    "$exist",
    "$or",
    "$and",
    "$not",
];

/// Where in a filter the compiler stands: a body filter has one level; a header filter has
/// the header names on top and string values under them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Body,
    HeaderNames,
    HeaderValue,
}

/// Compiles a filter whose top is at `level`, naming paths from `match` or `match_headers`.
pub(super) fn compile(filter: &Value, level: Level) -> Result<Node, FilterError> {
    let root = match level {
        Level::Body => "match",
        Level::HeaderNames | Level::HeaderValue => "match_headers",
    };
    Compiler::default().node(filter, root, 1, level)
}

#[derive(Default)]
struct Compiler {
    nodes: usize,
}

fn error(path: &str, reason: impl Into<String>) -> FilterError {
    FilterError {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// `match.data`, or `match["a.b"]` when the name would not read back as one segment.
fn field_path(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{name}")
    } else {
        let quoted = serde_json::to_string(name).unwrap_or_default();
        format!("{path}[{quoted}]")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Compiler {
    /// Counts one JSON value at `depth` against the bounds.
    fn enter(&mut self, path: &str, depth: usize) -> Result<(), FilterError> {
        self.nodes += 1;
        if depth > MAX_FILTER_DEPTH {
            return Err(error(
                path,
                format!("nests deeper than {MAX_FILTER_DEPTH} levels"),
            ));
        }
        if self.nodes > MAX_FILTER_NODES {
            return Err(error(
                path,
                format!("the filter holds more than {MAX_FILTER_NODES} values"),
            ));
        }
        Ok(())
    }

    fn node(
        &mut self,
        value: &Value,
        path: &str,
        depth: usize,
        level: Level,
    ) -> Result<Node, FilterError> {
        self.enter(path, depth)?;
        match value {
            Value::Object(map) => self.object(map, path, depth, level),
            Value::Array(items) => {
                if level == Level::HeaderNames {
                    return Err(error(path, "takes an object of header names, not an array"));
                }
                let nodes = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.node(item, &format!("{path}[{i}]"), depth + 1, level))
                    .collect::<Result<_, _>>()?;
                Ok(Node::All(nodes))
            }
            scalar => {
                match level {
                    Level::HeaderNames => {
                        return Err(error(
                            path,
                            format!("takes an object of header names, not {}", kind(scalar)),
                        ))
                    }
                    Level::HeaderValue => header_string(scalar, path)?,
                    Level::Body => {}
                }
                Ok(Node::Scalar(scalar.clone()))
            }
        }
    }

    fn object(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
        level: Level,
    ) -> Result<Node, FilterError> {
        if level == Level::HeaderValue && map.is_empty() {
            return Err(error(
                path,
                "header values are strings; {} never matches one",
            ));
        }
        let mut fields: Vec<(String, Node)> = Vec::new();
        let mut ops = Vec::new();
        for (key, arg) in map {
            if key.starts_with('$') {
                ops.push(self.op(key, arg, path, depth, level)?);
                continue;
            }
            let child_path = field_path(path, key);
            let (name, child_level) = match level {
                Level::Body => (key.clone(), Level::Body),
                Level::HeaderNames => (key.to_ascii_lowercase(), Level::HeaderValue),
                Level::HeaderValue => {
                    return Err(error(
                        &child_path,
                        "header values are strings, which have no fields",
                    ))
                }
            };
            if fields.iter().any(|(seen, _)| *seen == name) {
                return Err(error(
                    &child_path,
                    format!("names header {name:?} twice (header names are case-insensitive)"),
                ));
            }
            let node = self.node(arg, &child_path, depth + 1, child_level)?;
            fields.push((name, node));
        }
        if fields.is_empty() && !ops.is_empty() {
            Ok(Node::Ops(ops))
        } else {
            Ok(Node::Object { fields, ops })
        }
    }

    fn op(
        &mut self,
        name: &str,
        arg: &Value,
        path: &str,
        depth: usize,
        level: Level,
    ) -> Result<Op, FilterError> {
        let arg_path = format!("{path}.{name}");
        let value_op = !matches!(name, "$or" | "$and" | "$not");
        if level == Level::HeaderNames && value_op && OPERATORS.contains(&name) {
            return Err(error(
                path,
                format!("{name} applies to a header's value; put it under a header name"),
            ));
        }
        let bound = match name {
            "$gt" => Some(Cmp::Gt),
            "$gte" => Some(Cmp::Gte),
            "$lt" => Some(Cmp::Lt),
            "$lte" => Some(Cmp::Lte),
            _ => None,
        };
        if let Some(c) = bound {
            self.enter(&arg_path, depth + 1)?;
            return match arg {
                Value::Number(_) | Value::String(_) => {
                    if level == Level::HeaderValue {
                        header_string(arg, path)?;
                    }
                    Ok(Op::Cmp(c, arg.clone()))
                }
                other => Err(error(
                    path,
                    format!("{name} takes a number or a string, not {}", kind(other)),
                )),
            };
        }
        match name {
            "$eq" | "$neq" => {
                self.literal(arg, &arg_path, depth + 1, level)?;
                Ok(if name == "$eq" {
                    Op::Eq(arg.clone())
                } else {
                    Op::Neq(arg.clone())
                })
            }
            "$in" | "$nin" => {
                self.enter(&arg_path, depth + 1)?;
                match arg {
                    Value::Array(items) if !items.is_empty() => {
                        for (i, item) in items.iter().enumerate() {
                            self.literal(item, &format!("{arg_path}[{i}]"), depth + 2, level)?;
                        }
                        Ok(if name == "$in" {
                            Op::In(items.clone())
                        } else {
                            Op::Nin(items.clone())
                        })
                    }
                    Value::Array(_) => Err(error(path, format!("{name} takes a non-empty array"))),
                    Value::String(s) => Ok(if name == "$in" {
                        Op::Contains(s.clone())
                    } else {
                        Op::NotContains(s.clone())
                    }),
                    other => Err(error(
                        path,
                        format!(
                            "{name} takes an array of values or a string, not {}",
                            kind(other)
                        ),
                    )),
                }
            }
            "$startsWith" | "$endsWith" => {
                self.enter(&arg_path, depth + 1)?;
                match arg {
                    Value::String(s) if name == "$startsWith" => Ok(Op::StartsWith(s.clone())),
                    Value::String(s) => Ok(Op::EndsWith(s.clone())),
                    other => Err(error(
                        path,
                        format!("{name} takes a string, not {}", kind(other)),
                    )),
                }
            }
            "$exist" => {
                self.enter(&arg_path, depth + 1)?;
                match arg {
                    Value::Bool(b) => Ok(Op::Exist(*b)),
                    other => Err(error(
                        path,
                        format!("$exist takes true or false, not {}", kind(other)),
                    )),
                }
            }
            "$or" | "$and" => {
                self.enter(&arg_path, depth + 1)?;
                let items = match arg {
                    Value::Array(items) if !items.is_empty() => items,
                    other => {
                        let got = match other {
                            Value::Array(_) => "an empty array",
                            other => kind(other),
                        };
                        return Err(error(
                            path,
                            format!("{name} takes a non-empty array of filters, not {got}"),
                        ));
                    }
                };
                let nodes = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.node(item, &format!("{arg_path}[{i}]"), depth + 2, level))
                    .collect::<Result<_, _>>()?;
                Ok(if name == "$or" {
                    Op::Or(nodes)
                } else {
                    Op::And(nodes)
                })
            }
            "$not" => Ok(Op::Not(Box::new(self.node(
                arg,
                &arg_path,
                depth + 1,
                level,
            )?))),
            _ => Err(error(
                path,
                format!(
                    "unknown operator {name} (the operators are {})",
                    OPERATORS.join(", ")
                ),
            )),
        }
    }

    /// An operator's literal argument: counted and bounded like the rest of the filter, as
    /// `$eq` compares it with the document level by level. In a header filter every value in
    /// it must be a string.
    fn literal(
        &mut self,
        value: &Value,
        path: &str,
        depth: usize,
        level: Level,
    ) -> Result<(), FilterError> {
        self.enter(path, depth)?;
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.literal(item, &format!("{path}[{i}]"), depth + 1, level)?;
                }
                Ok(())
            }
            Value::Object(_) if level == Level::HeaderValue => {
                Err(error(path, "header values are strings, not objects"))
            }
            Value::Object(map) => {
                for (key, item) in map {
                    self.literal(item, &field_path(path, key), depth + 1, level)?;
                }
                Ok(())
            }
            scalar if level == Level::HeaderValue => header_string(scalar, path),
            _ => Ok(()),
        }
    }
}

/// Header values are strings: a number, boolean or null in a header filter never matches, so
/// it is refused rather than silently dead.
fn header_string(value: &Value, path: &str) -> Result<(), FilterError> {
    match value {
        Value::String(_) => Ok(()),
        other => Err(error(
            path,
            format!(
                "header values are strings, so {} never matches one; quote it: \"{}\"",
                kind(other),
                other
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_names_that_are_not_one_plain_segment() {
        assert_eq!(field_path("match", "data"), "match.data");
        assert_eq!(field_path("match", "x-request_id2"), "match.x-request_id2");
        assert_eq!(field_path("match", "a.b"), "match[\"a.b\"]");
        assert_eq!(field_path("match", ""), "match[\"\"]");
        assert_eq!(
            field_path("match", "say \"hi\""),
            "match[\"say \\\"hi\\\"\"]"
        );
    }

    #[test]
    fn every_listed_operator_compiles() {
        for name in OPERATORS {
            let arg = match name {
                "$or" | "$and" => serde_json::json!([{}]),
                "$exist" => serde_json::json!(true),
                "$not" | "$in" | "$nin" => serde_json::json!(["x"]),
                _ => serde_json::json!("x"),
            };
            let filter = serde_json::json!({ name: arg });
            assert!(compile(&filter, Level::Body).is_ok(), "{filter}");
        }
    }
}
