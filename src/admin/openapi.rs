//! The OpenAPI 3.1 document, generated from the handlers' annotations and the view types,
//! then completed by [`document`] with what holds for many operations at once (so each fact
//! is stated in one place): authentication (401, 429), the store (503), Idempotency-Key on
//! every POST (its format, 400, 409, 422, `Idempotent-Replayed`; and 413), the bulk endpoints'
//! at-least-one-filter rule, and links between operations. Each handler's own attribute
//! lists the statuses only it answers.

use actix_web::HttpResponse;
use serde_json::{json, Map, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::auth::Tenant;
use super::idempotency::KEY_PATTERN;
use super::MAX_BODY_BYTES;
use super::{
    dead_letters, destinations, events, quarantine, reconciliations, sources, undelivered, views,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "hookgate admin API", description = "Inspect events, replay them, work the dead-letter queue, and pause and resume destinations. Every request needs `Authorization: Bearer <token>`; a token sees only its tenant. Errors are `{\"error\": {\"code\", \"message\"}}`."),
    paths(
        events::list_events,
        events::get_event,
        events::raw_event,
        events::replay_event,
        events::bulk_replay,
        dead_letters::list,
        dead_letters::retry,
        dead_letters::bulk_retry,
        dead_letters::discard,
        sources::list,
        destinations::list,
        destinations::get,
        destinations::pause,
        destinations::resume,
        undelivered::list,
        undelivered::retry,
        quarantine::list,
        quarantine::get,
        quarantine::verify,
        quarantine::bulk_verify,
        quarantine::discard,
        reconciliations::list,
        reconciliations::run,
        openapi_json,
    ),
    components(schemas(
        views::EventSummaryView, views::EventPage, views::AttemptView, views::JobView,
        views::HeaderView, views::EventDetail, views::JobsReply, views::ReplayedReply,
        views::DryRunReply, views::DeadLetterView, views::DeadLetterPage, views::RetriedReply,
        views::ErrorBody, views::ErrorDetail, views::ReplayRequest, views::BulkReplayRequest,
        views::BulkRetryRequest, sources::SourceView, sources::SourcesReply,
        destinations::DestinationView, destinations::DestinationsReply,
        undelivered::UndeliveredView, undelivered::UndeliveredPage, undelivered::UndeliveredQuery,
        undelivered::UndeliveredRetryRequest, quarantine::QuarantineView,
        quarantine::QuarantinePage, quarantine::QuarantineDetail,
        quarantine::QuarantineVerifyRequest, quarantine::VerifyReply, quarantine::BulkVerifyReply,
        undelivered::UndeliveredRetryRequest,
        reconciliations::ReconciliationView, reconciliations::ReconciliationsReply,
        reconciliations::ReconciliationRequest,
    )),
    modifiers(&BearerAuth),
)]
pub struct AdminApi;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every `error.code` the admin API answers with (`AdminError::code`, the router's
/// `not_found`, a method a path does not allow, a body over the limit, and the
/// authentication limiter's `too_many_auth_failures`).
pub const ERROR_CODES: [&str; 11] = [
    "bad_request",
    "unauthorized",
    "not_found",
    "conflict",
    "idempotency_in_progress",
    "unprocessable",
    "idempotency_key_reused",
    "too_many_auth_failures",
    "store_unavailable",
    "method_not_allowed",
    "payload_too_large",
];

/// The bulk endpoints' filters, of which a request must give at least one (non-null).
const BULK_FILTERS: [(&str, &[&str]); 2] = [
    (
        "BulkReplayRequest",
        &[
            "source",
            "event_type",
            "provider_event_id",
            "status",
            "received_from",
            "received_to",
        ],
    ),
    ("BulkRetryRequest", &["destination", "source"]),
];

/// Links from a response to the operations that take one of its ids, so a client (or a
/// stateful tester) can walk from a list to its items.
const LINKS: [(&str, &str, &str, &str, &str); 7] = [
    (
        "list_events",
        "200",
        "get_event",
        "id",
        "$response.body#/data/0/id",
    ),
    (
        "list_events",
        "200",
        "replay_event",
        "id",
        "$response.body#/data/0/id",
    ),
    (
        "list_dead_letters",
        "200",
        "retry_dead_letter",
        "job_id",
        "$response.body#/data/0/id",
    ),
    (
        "list_dead_letters",
        "200",
        "discard_dead_letter",
        "job_id",
        "$response.body#/data/0/id",
    ),
    (
        "replay_event",
        "202",
        "get_event",
        "id",
        "$response.body#/jobs/0/event_id",
    ),
    (
        "list_sources",
        "200",
        "list_reconciliations",
        "name",
        "$response.body#/data/0/name",
    ),
    (
        "list_sources",
        "200",
        "run_reconciliation",
        "name",
        "$response.body#/data/0/name",
    ),
];

fn error_response(description: &str, headers: Value) -> Value {
    json!({
        "description": description,
        "headers": headers,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    })
}

fn retry_after(when: &str) -> Value {
    json!({
        "Retry-After": {
            "description": format!("Seconds to wait before {when}"),
            "required": true,
            "schema": {"type": "integer", "minimum": 0},
        }
    })
}

/// Adds `status` to `responses`, or appends `also` to the description of the one there.
fn add_response(responses: &mut Map<String, Value>, status: &str, response: Value, also: &str) {
    match responses.get_mut(status) {
        Some(existing) => {
            let description = existing["description"].as_str().unwrap_or_default();
            existing["description"] = Value::from(format!("{description}; or {also}"));
        }
        None => {
            responses.insert(status.to_owned(), response);
        }
    }
}

/// The complete document, as `GET /admin/v1/openapi.json` serves it.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(AdminApi::openapi()).expect("the document serialises");
    doc["security"] = json!([{"bearer": []}]);
    let schemas = &mut doc["components"]["schemas"];
    schemas["ErrorDetail"]["properties"]["code"]["enum"] = json!(ERROR_CODES);
    for (schema, filters) in BULK_FILTERS {
        let any_of: Vec<Value> = filters
            .iter()
            .map(|f| json!({"required": [f], "properties": {*f: {"type": "string"}}}))
            .collect();
        schemas[schema]["anyOf"] = Value::from(any_of);
    }

    let key_param = json!({
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": "Makes a retried POST act once: the same key with the same request answers the first response again, with `Idempotent-Replayed: true`. 1 to 255 visible ASCII characters.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": KEY_PATTERN},
    });
    let replayed = json!({
        "description": "`true` when this is the saved response of an earlier request with the same Idempotency-Key",
        "schema": {"type": "string", "enum": ["true"]},
    });

    let paths = doc["paths"].as_object_mut().expect("paths");
    for (path, item) in paths.iter_mut() {
        for (method, op) in item.as_object_mut().expect("a path item").iter_mut() {
            let uses_store = path != "/admin/v1/openapi.json";
            if method == "post" {
                let responses = op["responses"].as_object_mut().expect("responses");
                // Responses given inside the action are saved and may come back replayed;
                // 401, 413, 429 and 503 (added below or after) never are.
                for response in responses.values_mut() {
                    let headers = response
                        .as_object_mut()
                        .expect("a response")
                        .entry("headers")
                        .or_insert_with(|| json!({}));
                    headers["Idempotent-Replayed"] = replayed.clone();
                }
                let replayable = json!({"Idempotent-Replayed": replayed});
                add_response(
                    responses,
                    "400",
                    error_response("`bad_request`: a malformed Idempotency-Key", json!({})),
                    "a malformed Idempotency-Key",
                );
                add_response(
                    responses,
                    "409",
                    error_response(
                        "`idempotency_in_progress`: a request with this Idempotency-Key is still running",
                        replayable.clone(),
                    ),
                    "`idempotency_in_progress`: a request with this Idempotency-Key is still running",
                );
                add_response(
                    responses,
                    "422",
                    error_response(
                        "`idempotency_key_reused`: this Idempotency-Key was used for a different request",
                        replayable,
                    ),
                    "`idempotency_key_reused`: this Idempotency-Key was used for a different request",
                );
                add_response(
                    responses,
                    "413",
                    error_response(
                        &format!("`payload_too_large`: a body over {MAX_BODY_BYTES} bytes"),
                        json!({}),
                    ),
                    "a body over the limit",
                );
                let params = op
                    .as_object_mut()
                    .expect("an operation")
                    .entry("parameters")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .expect("parameters");
                params.retain(|p| p["name"] != "Idempotency-Key");
                params.push(key_param.clone());
            }
            let responses = op["responses"].as_object_mut().expect("responses");
            responses.insert(
                "401".into(),
                error_response(
                    "`unauthorized`: no valid `Authorization: Bearer <token>`",
                    json!({"WWW-Authenticate": {
                        "required": true,
                        "schema": {"type": "string", "enum": ["Bearer"]},
                    }}),
                ),
            );
            responses.insert(
                "429".into(),
                error_response(
                    "`too_many_auth_failures`: too many failed authentications from this client address",
                    retry_after("authenticating again"),
                ),
            );
            if uses_store {
                responses.insert(
                    "503".into(),
                    error_response(
                        "`store_unavailable`: the store cannot be reached; retry later",
                        retry_after("retrying"),
                    ),
                );
            }
        }
    }

    // The replay body is optional (empty means "every destination"), but `null` is not one.
    let replay = &mut doc["paths"]["/admin/v1/events/{id}/replay"]["post"]["requestBody"];
    replay["required"] = Value::Bool(false);
    replay["content"]["application/json"]["schema"] =
        json!({"$ref": "#/components/schemas/ReplayRequest"});

    // The raw body is bytes, sent as a download (utoipa would call `Vec<u8>` an array).
    let raw = &mut doc["paths"]["/admin/v1/events/{id}/raw"]["get"]["responses"]["200"];
    raw["content"]["application/octet-stream"]["schema"] =
        json!({"type": "string", "format": "binary"});
    raw["headers"]["Content-Disposition"]["required"] = Value::Bool(true);

    let path_of = |doc: &Value, id: &str| -> Option<(String, String)> {
        doc["paths"].as_object()?.iter().find_map(|(path, item)| {
            item.as_object()?
                .iter()
                .find(|(_, op)| op["operationId"] == id)
                .map(|(method, _)| (path.clone(), method.clone()))
        })
    };
    for (from, status, to, param, value) in LINKS {
        let (path, method) = path_of(&doc, from).expect("a linked operation exists");
        assert!(path_of(&doc, to).is_some(), "{to} exists");
        doc["paths"][&path][&method]["responses"][status]["links"][to] =
            json!({"operationId": to, "parameters": {param: value}});
    }
    doc
}

#[utoipa::path(get, path = "/admin/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)),
    security(("bearer" = [])))]
pub async fn openapi_json(_tenant: Tenant) -> HttpResponse {
    HttpResponse::Ok().json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::error::AdminError;
    use crate::admin::idempotency::valid_key;
    use crate::queue::JobStatus;

    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push((method.clone(), path.clone(), op.clone()));
            }
        }
        assert_eq!(ops.len(), 24);
        ops
    }

    fn param<'a>(op: &'a Value, name: &str) -> &'a Value {
        op["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .unwrap_or_else(|| panic!("no parameter {name} in {op}"))
    }

    #[test]
    fn every_operation_documents_authentication_errors_and_content_types() {
        let doc = document();
        assert_eq!(doc["security"], json!([{"bearer": []}]));
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"],
            json!({"type": "http", "scheme": "bearer"})
        );
        for (method, path, op) in operations(&doc) {
            let label = format!("{method} {path}");
            assert_eq!(op["security"], json!([{"bearer": []}]), "{label}");
            let responses = op["responses"].as_object().unwrap();
            assert_eq!(
                responses["401"]["headers"]["WWW-Authenticate"]["required"], true,
                "{label}"
            );
            for (status, header) in [("429", "Retry-After"), ("503", "Retry-After")] {
                if status == "503" && path.ends_with("/openapi.json") {
                    assert!(
                        !responses.contains_key("503"),
                        "{label} never uses the store"
                    );
                    continue;
                }
                assert_eq!(
                    responses[status]["headers"][header]["required"], true,
                    "{label} {status}"
                );
            }
            for (status, response) in responses {
                let content = response["content"].as_object();
                assert!(content.is_some_and(|c| c.len() == 1), "{label} {status}");
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{label} {status}"
                    );
                }
            }
            if method == "post" {
                for status in ["400", "409", "413", "422"] {
                    assert!(responses.contains_key(status), "{label} {status}");
                }
                // Saved answers can come back replayed; 401, 413, 429, 503 and a malformed
                // key's 400 never are saved.
                for (status, response) in responses {
                    if status.starts_with('2') || ["404", "409", "422"].contains(&status.as_str()) {
                        let header = &response["headers"]["Idempotent-Replayed"];
                        assert_eq!(
                            header["schema"]["enum"],
                            json!(["true"]),
                            "{label} {status}"
                        );
                    }
                }
            }
        }
        let raw = &doc["paths"]["/admin/v1/events/{id}/raw"]["get"]["responses"]["200"];
        assert_eq!(
            raw["content"]["application/octet-stream"]["schema"],
            json!({"type": "string", "format": "binary"})
        );
        assert!(raw["headers"]["Hookgate-Original-Content-Type"].is_object());
    }

    #[test]
    fn the_error_schema_names_every_code() {
        let doc = document();
        let schema = &doc["components"]["schemas"];
        assert_eq!(
            schema["ErrorBody"]["required"],
            json!(["error"]),
            "{}",
            schema["ErrorBody"]
        );
        assert_eq!(
            schema["ErrorDetail"]["required"],
            json!(["code", "message"])
        );
        let codes = &schema["ErrorDetail"]["properties"]["code"]["enum"];
        // A new AdminError variant fails to compile here until its code is listed.
        let sample = |e: &AdminError| match e {
            AdminError::Unauthorized
            | AdminError::NotFound(_)
            | AdminError::BadRequest(_)
            | AdminError::Unprocessable(_)
            | AdminError::IdempotencyKeyReused
            | AdminError::IdempotencyInProgress { .. }
            | AdminError::Conflict(_)
            | AdminError::TooManyAuthFailures { .. }
            | AdminError::Store(_) => e.code(),
        };
        let errors = [
            AdminError::Unauthorized,
            AdminError::NotFound("event"),
            AdminError::BadRequest(String::new()),
            AdminError::Unprocessable(String::new()),
            AdminError::IdempotencyKeyReused,
            AdminError::IdempotencyInProgress { done: None },
            AdminError::Conflict(String::new()),
            AdminError::TooManyAuthFailures {
                retry_after_seconds: 1,
            },
            AdminError::Store(std::sync::Arc::new(crate::store::StoreError::Corrupt(
                String::new(),
            ))),
        ];
        for error in &errors {
            assert!(
                codes.as_array().unwrap().contains(&json!(sample(error))),
                "{}",
                error.code()
            );
        }
    }

    /// A filter with a NUL is refused (400: no stored value holds one), so the document's
    /// filter strings exclude it, or a client generating valid data would be refused.
    #[test]
    fn filter_strings_exclude_nul_as_the_server_does() {
        let doc = document();
        let nul_free = json!("^[^\\u0000]*$");
        for (path, names) in [
            (
                "/admin/v1/events",
                &["source", "event_type", "provider_event_id"][..],
            ),
            ("/admin/v1/dead-letters", &["destination", "source"][..]),
        ] {
            for name in names {
                let schema = &param(&doc["paths"][path]["get"], name)["schema"];
                assert_eq!(schema["pattern"], nul_free, "{path} {name}: {schema}");
            }
        }
        for (schema, names) in [
            (
                "BulkReplayRequest",
                &["source", "event_type", "provider_event_id"][..],
            ),
            ("BulkRetryRequest", &["destination", "source"][..]),
        ] {
            for name in names {
                let property = &doc["components"]["schemas"][schema]["properties"][name];
                assert_eq!(property["pattern"], nul_free, "{schema}.{name}: {property}");
            }
        }
    }

    #[test]
    fn limit_is_1_to_500_and_status_is_one_the_server_parses() {
        let doc = document();
        for path in ["/admin/v1/events", "/admin/v1/dead-letters"] {
            let limit = &param(&doc["paths"][path]["get"], "limit")["schema"];
            assert_eq!(
                (&limit["type"], &limit["minimum"], &limit["maximum"]),
                (&json!("integer"), &json!(1), &json!(500)),
                "{path}"
            );
            assert_eq!(limit["default"], 50, "{path}");
        }
        for n in [0, 1, 500, 501] {
            let accepted = crate::admin::cursor::limit(Some(n)).is_ok();
            assert_eq!(accepted, (1..=500).contains(&n), "{n}");
        }
        let status = &param(&doc["paths"]["/admin/v1/events"]["get"], "status")["schema"];
        let names: Vec<&str> = status["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 5);
        for name in names {
            let parsed = crate::store::EventStatus::parse(name);
            let expected = match name {
                "no_route" => Some(crate::store::EventStatus::NoRoute),
                job => JobStatus::parse(job).map(crate::store::EventStatus::Job),
            };
            assert!(parsed.is_some() && parsed == expected, "{name}");
        }
    }

    #[test]
    fn every_post_takes_an_idempotency_key_of_the_validated_format() {
        let doc = document();
        let posts: Vec<_> = operations(&doc)
            .into_iter()
            .filter(|(m, _, _)| m == "post")
            .collect();
        assert_eq!(posts.len(), 10);
        for (_, path, op) in posts {
            let key = param(&op, "Idempotency-Key");
            assert_eq!(key["in"], "header", "{path}");
            assert_eq!(key["required"], false, "{path}");
            assert_eq!(
                key["schema"],
                json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": KEY_PATTERN}),
                "{path}"
            );
        }
        // The pattern and the server's check agree, character class and length alike.
        assert_eq!(KEY_PATTERN, "^[!-~]{1,255}$");
        for b in 0u8..=255 {
            let c = char::from(b);
            assert_eq!(valid_key(&c.to_string()), ('!'..='~').contains(&c), "{b}");
        }
        assert!(valid_key(&"~".repeat(255)) && !valid_key(&"~".repeat(256)));
    }

    #[test]
    fn the_bulk_endpoints_require_one_filter() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        for (name, non_filters) in [
            ("BulkReplayRequest", &["dry_run"][..]),
            ("BulkRetryRequest", &[][..]),
        ] {
            let schema = &schemas[name];
            assert_eq!(schema["additionalProperties"], false, "{name}");
            let mut filters: Vec<&String> = schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| !non_filters.contains(&k.as_str()))
                .collect();
            filters.sort();
            let mut any_of: Vec<&String> = Vec::new();
            for branch in schema["anyOf"].as_array().unwrap() {
                let required = branch["required"].as_array().unwrap();
                assert_eq!(required.len(), 1, "{name}: {branch}");
                let field = required[0].as_str().unwrap();
                assert_eq!(branch["properties"][field]["type"], "string", "non-null");
                any_of.push(filters.iter().copied().find(|f| *f == field).unwrap());
            }
            any_of.sort();
            assert_eq!(any_of, filters, "{name}");
        }
        let replay = &doc["paths"]["/admin/v1/events/{id}/replay"]["post"]["requestBody"];
        assert_eq!(replay["required"], false);
        assert_eq!(
            replay["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ReplayRequest"
        );
    }

    #[test]
    fn links_name_operations_and_parameters_that_exist() {
        let doc = document();
        let ops = operations(&doc);
        let mut links = 0;
        for (_, _, op) in &ops {
            for response in op["responses"].as_object().unwrap().values() {
                for link in response["links"].as_object().into_iter().flatten() {
                    let (_, target) = link.1["operationId"]
                        .as_str()
                        .and_then(|id| ops.iter().find(|(_, _, o)| o["operationId"] == id))
                        .map(|(_, p, o)| (p, o))
                        .unwrap_or_else(|| panic!("{link:?}"));
                    for name in link.1["parameters"].as_object().unwrap().keys() {
                        param(target, name);
                    }
                    links += 1;
                }
            }
        }
        assert_eq!(links, LINKS.len());
    }
}
