//! The registry lists every `#[idempotent]` handler linked into the program.

mod support;

use actix_web::{HttpResponse, put, web};

/// Declared here, with `#[idempotent]` below the route attribute: the route has expanded
/// first, and `#[idempotent]` reads its method and path back from this file.
#[put("/test/things/{id}")]
#[idem::idempotent(scope = id, backend = sqlx::Postgres, retention = "7d")]
async fn put_thing(id: idem::UnverifiedScope<web::Path<i64>>) -> HttpResponse {
    HttpResponse::Ok().body(id.into_inner().to_string())
}

#[test]
fn the_registry_lists_the_example_and_local_handlers_sorted_by_module() {
    // Referenced so the linker keeps this file's handler.
    let _ = put_thing;
    let policies: Vec<_> = idem::policies()
        .into_iter()
        .map(|p| {
            (
                p.module_path()
                    .rsplit("::")
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                p.handler(),
                p.scope(),
                p.retention().as_secs(),
                p.route(),
            )
        })
        .collect();
    assert_eq!(
        policies,
        [
            (
                "registry".to_owned(),
                "put_thing",
                "id",
                7 * 24 * 3600,
                Some(("PUT", "/test/things/{id}"))
            ),
            // Generic over the database, so registered with `.route(..)`, without a
            // route attribute for the registry to see.
            ("app".to_owned(), "create_order", "account", 24 * 3600, None),
            // `POST /notifications` (keys in Redis) of the actix example, then of the axum
            // one: written once on axum too, since keys in Redis name no database.
            (
                "notifications".to_owned(),
                "create_notification",
                "account",
                24 * 3600,
                None
            ),
            (
                "notifications".to_owned(),
                "create_notification",
                "account",
                24 * 3600,
                None
            ),
            // The axum example's, which the test support serves too: axum handlers are
            // not generic, so there is one per database, each registered.
            (
                "on_postgres".to_owned(),
                "create_order",
                "account",
                24 * 3600,
                None
            ),
            (
                "on_sqlite".to_owned(),
                "create_order",
                "account",
                24 * 3600,
                None
            ),
            // The test support's handler that holds its key until a test lets it go, and
            // its axum twins.
            ("held".to_owned(), "held", "account", 24 * 3600, None),
            ("on_postgres".to_owned(), "held", "account", 24 * 3600, None),
            ("on_sqlite".to_owned(), "held", "account", 24 * 3600, None),
        ]
    );
}

/// The registry's report of a `store = redis` handler must say its keys are in Redis:
/// a reviewer reading "phased" would assume a database transaction is behind it.
#[test]
fn only_the_redis_endpoints_report_keys_in_redis() {
    let _ = put_thing;
    let in_redis: Vec<_> = idem::policies()
        .into_iter()
        .filter(|p| p.keys_in_redis())
        .map(|p| p.handler())
        .collect();
    assert_eq!(in_redis, ["create_notification", "create_notification"]);
    let report = idem::registry::report();
    let redis_sections = report
        .iter()
        .filter(|r| r.mechanism == idem::report::Mechanism::RedisSteps)
        .count();
    assert_eq!(redis_sections, 2, "{report:#?}");
}
