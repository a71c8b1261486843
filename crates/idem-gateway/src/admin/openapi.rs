//! The admin API's OpenAPI 3.1 document, served at `GET /openapi.json` and kept in
//! `docs/admin-openapi.json`.
//!
//! It is derived from the code: the routes and their parameters from the handlers of
//! [`admin`](super), the record from [`RecordView`], and each route's problems from the
//! [`AdminRejection`]s it answers with, rendered as the API renders them (status, headers and
//! body examples).

use std::{collections::BTreeMap, sync::LazyLock};

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use idem_core::KeyError;
use utoipa::{
    IntoResponses, Modify, OpenApi,
    openapi::{
        self, ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, RefOr, ResponseBuilder,
        SchemaFormat, Type,
        example::ExampleBuilder,
        response::Response,
        security::{Http, HttpAuthScheme, SecurityScheme},
    },
};

use super::RecordView;
use crate::error::problem::{AdminRejection, Problem};

/// The name of the bearer security scheme of the routes that need the admin token (the
/// handlers' `security(("admin_token" = []))` name it too: the macro takes a literal only).
const ADMIN_TOKEN: &str = "admin_token";

/// The name of the problem+json body's schema.
const PROBLEM: &str = "Problem";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "idem admin API",
        description = "The admin listener of `idem serve` (`--admin-listen`): health, readiness, \
            metrics, records (one key, or a filtered listing) and statistics. Errors are \
            `application/problem+json` (RFC 9457)."
    ),
    paths(
        super::healthz,
        super::readyz,
        super::metrics,
        super::list_keys,
        super::show_key,
        super::forget_key,
        super::stats,
        super::openapi_json
    ),
    components(schemas(RecordView)),
    modifiers(&SharedComponents),
    tags(
        (name = "probes", description = "Liveness and readiness; never need the admin token."),
        (name = "metrics", description = "Prometheus metrics."),
        (name = "keys", description = "The records: one key in one scope, or a filtered listing."),
        (name = "stats", description = "Record counts and the store's latency."),
        (name = "meta", description = "This document; never needs the admin token."),
    )
)]
struct AdminApi;

/// The document as served and committed: pretty-printed JSON with a trailing newline.
pub(crate) fn document() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        let mut json = AdminApi::openapi()
            .to_pretty_json()
            .expect("an OpenAPI document always serializes");
        json.push('\n');
        json
    });
    &DOCUMENT
}

/// The problem+json schema and the admin token's security scheme, which the routes refer to.
struct SharedComponents;

impl Modify for SharedComponents {
    fn modify(&self, openapi: &mut openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            ADMIN_TOKEN,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The content of `--admin-token-file`, as `Authorization: Bearer <token>`. \
                         Needed only when the gateway is started with a token file; without one, \
                         these routes are open (the admin listener is then on loopback).",
                    ))
                    .build(),
            ),
        );
        components
            .schemas
            .insert(PROBLEM.to_owned(), problem_schema());
    }
}

/// The body of every admin error: RFC 9457's `{"type","title","status","detail"}`.
fn problem_schema() -> RefOr<openapi::Schema> {
    let string = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "An RFC 9457 problem. Clients match on `type`; `title` depends on the type only.",
        ))
        .property(
            "type",
            string("A stable URI naming the problem: `urn:idem:problem:…`.")
                .format(Some(SchemaFormat::Custom("uri".to_owned()))),
        )
        .property("title", string("A short summary of the type."))
        .property(
            "status",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(400))
                .maximum(Some(599))
                .description(Some("The response's status.")),
        )
        .property(
            "detail",
            string("What happened to this request and what the caller can do."),
        )
        .required("type")
        .required("title")
        .required("status")
        .required("detail")
        .into()
}

/// The responses of `rejections`, one per status: their titles and types, their headers (beyond
/// `Content-Type` and `Content-Length`), and each one's body as an example.
fn problem_responses(rejections: &[AdminRejection]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<&AdminRejection>> = BTreeMap::new();
    for rejection in rejections {
        by_status
            .entry(rejection.status().as_u16())
            .or_default()
            .push(rejection);
    }
    by_status
        .into_iter()
        .map(|(status, rejections)| {
            let description = rejections
                .iter()
                .map(|rejection| format!("{} (`{}`).", rejection.title(), rejection.problem_type()))
                .collect::<Vec<_>>()
                .join(" ");
            let examples = rejections.iter().map(|rejection| {
                let body: serde_json::Value =
                    serde_json::from_slice(&rejection.body()).expect("a problem body is JSON");
                let name = rejection
                    .problem_type()
                    .rsplit(':')
                    .next()
                    .unwrap_or_default();
                (name, ExampleBuilder::new().value(Some(body)).build())
            });
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(PROBLEM)))
                .examples_from_iter(examples)
                .build();
            let mut response = ResponseBuilder::new()
                .description(description)
                .content("application/problem+json", content);
            for rejection in &rejections {
                let rendered = rejection.to_response::<bytes::Bytes>();
                for (name, value) in rendered.headers() {
                    if name == CONTENT_TYPE || name == CONTENT_LENGTH {
                        continue;
                    }
                    let value = value.to_str().expect("problem headers are ASCII");
                    let header = HeaderBuilder::new()
                        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                        .description(Some(format!("`{value}`.")))
                        .example(Some(value.into()))
                        .build();
                    response = response.header(name.as_str(), header);
                }
            }
            (status.to_string(), response.build().into())
        })
        .collect()
}

/// The problems of `GET /metrics`.
pub(crate) struct MetricsProblems;

impl IntoResponses for MetricsProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problem_responses(&[AdminRejection::Unauthorized])
    }
}

/// The problems of `GET /v1/keys`.
pub(crate) struct ListKeysProblems;

impl IntoResponses for ListKeysProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problem_responses(&[
            AdminRejection::InvalidQuery("state is `processing` or `completed`"),
            AdminRejection::InvalidScope,
            AdminRejection::Unauthorized,
            AdminRejection::RecordCorrupted,
            AdminRejection::StoreUnavailable,
        ])
    }
}

/// The problems of `GET /v1/stats`.
pub(crate) struct StatsProblems;

impl IntoResponses for StatsProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problem_responses(&[AdminRejection::Unauthorized])
    }
}

/// The problems of `GET /v1/keys/{key}`.
pub(crate) struct ShowKeyProblems;

impl IntoResponses for ShowKeyProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problem_responses(&[
            AdminRejection::InvalidKey(KeyError::List),
            AdminRejection::InvalidScope,
            AdminRejection::Unauthorized,
            AdminRejection::KeyNotFound,
            AdminRejection::RecordCorrupted,
            AdminRejection::StoreUnavailable,
        ])
    }
}

/// The problems of `DELETE /v1/keys/{key}`.
pub(crate) struct ForgetKeyProblems;

impl IntoResponses for ForgetKeyProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        problem_responses(&[
            AdminRejection::InvalidKey(KeyError::List),
            AdminRejection::InvalidScope,
            AdminRejection::InvalidForce,
            AdminRejection::Unauthorized,
            AdminRejection::KeyNotFound,
            AdminRejection::KeyProcessing,
            AdminRejection::RecordCorrupted,
            AdminRejection::StoreUnavailable,
        ])
    }
}
