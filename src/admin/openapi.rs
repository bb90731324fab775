//! The OpenAPI 3 document, generated from the handlers' annotations and the view types.

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::auth::Tenant;
use super::{dead_letters, events, views};

#[derive(OpenApi)]
#[openapi(
    info(title = "hookgate admin API", description = "Inspect events, replay them, and work the dead-letter queue. Every request needs `Authorization: Bearer <token>`; a token sees only its tenant."),
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
        openapi_json,
    ),
    components(schemas(
        views::EventSummaryView, views::EventPage, views::AttemptView, views::JobView,
        views::HeaderView, views::EventDetail, views::JobsReply, views::ReplayedReply,
        views::DryRunReply, views::DeadLetterView, views::DeadLetterPage, views::RetriedReply,
        views::ErrorBody, views::ErrorDetail, views::ReplayRequest, views::BulkReplayRequest,
        views::BulkRetryRequest,
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

#[utoipa::path(get, path = "/admin/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document")),
    security(("bearer" = [])))]
pub async fn openapi_json(_tenant: Tenant) -> HttpResponse {
    HttpResponse::Ok().json(AdminApi::openapi())
}
