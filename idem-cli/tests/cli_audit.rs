//! `idem audit` on the fixture applications in `tests/fixtures` (every registration style
//! of actix-web and axum) and on idem's own examples: the table, the JSON contract, the
//! per-endpoint report and the `--deny-unprotected` gate. No database: the audit reads
//! sources only.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{IDEM, Run};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `idem args..` run in `dir`, without `DATABASE_URL` (the audit needs none).
fn idem_in(dir: &Path, args: &[&str]) -> Run {
    let output = Command::new(IDEM)
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run the idem binary");
    Run(output)
}

fn routes(json: &str) -> Vec<Value> {
    let value: Value = serde_json::from_str(json).expect("the output is JSON");
    value["routes"].as_array().expect("a routes array").clone()
}

fn route<'a>(routes: &'a [Value], method: &str, path: &str) -> &'a Value {
    routes
        .iter()
        .find(|r| r["method"] == method && r["path"] == path)
        .unwrap_or_else(|| panic!("no {method} {path} in {routes:#?}"))
}

#[test]
fn the_json_of_the_actix_fixture_is_the_pinned_contract() {
    let json = idem_in(&fixtures(), &["audit", "--format", "json", "audit-actix"]).success();
    let pinned = std::fs::read_to_string(fixtures().join("audit-actix.json")).unwrap();
    assert_eq!(
        json, pinned,
        "the JSON output changed: review it like an API change"
    );
    // Every route has every field of the schema, in the documented order.
    let fields = [
        "method",
        "path",
        "handler",
        "file",
        "line",
        "protection",
        "scope",
        "retention",
        "key",
        "form",
        "store",
        "reason",
        "suggestion",
    ];
    for route in routes(&json) {
        let keys: Vec<&str> = route
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = fields.to_vec();
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "{route}");
    }
    // And in the text itself, the documented order.
    let first = json.find("\"method\"").unwrap();
    let positions: Vec<usize> = fields
        .iter()
        .map(|f| first + json[first..].find(&format!("\"{f}\"")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
}

#[test]
fn every_actix_registration_style_is_found() {
    let json = idem_in(&fixtures(), &["audit", "--format", "json", "audit-actix"]).success();
    let routes = routes(&json);
    // `.service(f)` of an attribute handler inside `web::scope("/api")`.
    let order = route(&routes, "POST", "/api/orders");
    assert_eq!(order["protection"], "idempotent");
    assert_eq!(order["scope"], "account");
    assert_eq!(order["retention"], "48h");
    assert_eq!(order["form"], "single");
    assert_eq!(order["store"], "database");
    assert_eq!(order["key"], "header(\"Idempotency-Key\")");
    // Scopes in scopes, `web::resource(..).route(web::put().to(f))`; its GET is not listed.
    let item = route(&routes, "PUT", "/api/v2/items/{id}");
    assert_eq!(item["protection"], "none");
    assert_eq!(item["suggestion"], "client-generated id");
    assert!(
        !routes
            .iter()
            .any(|r| r["handler"] == "get_item" || r["handler"] == "list_orders")
    );
    // `.route(path, web::post().to(f))` whose handler upserts: the natural key.
    assert_eq!(
        route(&routes, "POST", "/api/tags")["suggestion"],
        "natural key"
    );
    // `web::method(Method::DELETE)`.
    assert_eq!(
        route(&routes, "DELETE", "/api/sessions")["handler"],
        "logout_all"
    );
    // `#[route(.., method = "PUT", method = "DELETE")]`: one row per method, exempt.
    for method in ["PUT", "DELETE"] {
        let cart = route(&routes, method, "/carts/{id}");
        assert_eq!(cart["protection"], "exempt");
        assert_eq!(cart["reason"], "PUT and DELETE by the client's cart id");
    }
    // `web::scope("/billing").configure(billing::configure)`: the phased form.
    let charge = route(&routes, "POST", "/billing/charges");
    assert_eq!(charge["form"], "phased");
    assert_eq!(charge["file"], "audit-actix/src/billing.rs");
    // The webhook receiver's key.
    let stripe = route(&routes, "POST", "/webhooks/stripe");
    assert_eq!(stripe["key"], "header(\"webhook-id\")");
    assert_eq!(stripe["retention"], "5d");
    // A handler calling an HTTP client: the phased form with derived keys.
    assert_eq!(
        route(&routes, "POST", "/notify")["suggestion"],
        "phased form with derived keys"
    );
    // A route bound by `let` is read where it is registered.
    assert_eq!(route(&routes, "POST", "/archive")["handler"], "archive");
    // A closure and a route handed in by a caller are listed, not dropped.
    let inline = route(&routes, "POST", "/inline");
    assert_eq!(inline["protection"], "unresolved");
    assert_eq!(inline["reason"], "the handler is a closure");
    let mounted = route(&routes, "?", "/mounted");
    assert_eq!(mounted["protection"], "unresolved");
    assert_eq!(mounted["line"], 68);
}

const AXUM_TABLE: &str = "\
METHOD  PATH               HANDLER         PROTECTION  DETAIL                                                                                 LOCATION
POST    /admin/refunds     refund          none        suggestion: phased form with derived keys                                              audit-axum/src/admin.rs:22
PATCH   /admin/users/{id}  patch_user      none        suggestion: Idempotency-Key table                                                      audit-axum/src/admin.rs:27
PUT     /carts/{id}        put_cart        exempt      PUT by the client's cart id                                                            audit-axum/src/main.rs:23
DELETE  /carts/{id}        delete_cart     none        suggestion: client-generated id                                                        audit-axum/src/main.rs:27
?       /extra             ?               unresolved  the route is passed through the variable `extra`                                       audit-axum/src/main.rs:63
POST    /inline            ?               unresolved  the handler is a closure                                                               audit-axum/src/main.rs:64
POST    /invoices          create_invoice  layer       scope account, retention 48h, key header(\"Idempotency-Key\"), single, policy INVOICES   audit-axum/src/main.rs:49
POST    /orders            create_order    idempotent  scope account, retention 24h, key header(\"Idempotency-Key\"), single                    audit-axum/src/main.rs:14
?       /partners          ?               unresolved  a router built by a function the sources do not hold                                   audit-axum/src/main.rs:66
POST    /payments          pay             idempotent  scope account, retention 24h, key header(\"Idempotency-Key\"), phased                    audit-axum/src/main.rs:32
POST    /transfers         transfer        layer       scope account, retention 24h, key header(\"Idempotency-Key\"), single, policy TRANSFERS  audit-axum/src/admin.rs:31
POST    /webhooks/github   github_event    idempotent  scope sender, retention 3d, key json(\"id\"), single                                     audit-axum/src/main.rs:45

12 mutating routes: 3 idempotent, 2 layer, 1 exempt, 3 none, 3 unresolved
";

#[test]
fn the_table_lists_every_axum_registration_style() {
    // Chains (`post(f).get(g)`: only POST), `on(MethodFilter::POST, f)`, `nest` of a
    // function's router, `merge` of a layered one, a route's own `route_layer`, a method
    // router passed in, a closure, and a nest of a router from outside the sources.
    let table = idem_in(&fixtures(), &["audit", "audit-axum"]).success();
    assert_eq!(table, AXUM_TABLE);
}

#[test]
fn the_report_renders_each_endpoint_with_its_tests() {
    let report = idem_in(&fixtures(), &["audit", "--format", "report", "audit-axum"]).success();
    let sections: Vec<&str> = report.split("\n\n").collect();
    assert_eq!(sections.len(), 12, "{report}");
    let section = |title: &str| {
        sections
            .iter()
            .find(|s| s.starts_with(&format!("## Idempotency for {title}\n")))
            .unwrap_or_else(|| panic!("no section {title} in {report}"))
            .trim_end()
            .to_owned()
    };
    assert_eq!(
        section("POST /orders"),
        "## Idempotency for POST /orders
- Mechanism: Idempotency-Key table (single transaction)
- Key scope and retention: account, 24h
- Fingerprint: method, path, query parameters, decoded body (canonical JSON, form fields, or bytes by its Content-Type)
- Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing
- Downstream keys: none
- Tests: concurrency, replay, mismatch"
    );
    // The phases named in the handler and in the function it hands its `Phases` to.
    assert_eq!(
        section("POST /payments"),
        "## Idempotency for POST /payments
- Mechanism: phased with recovery points
- Key scope and retention: account, 24h
- Fingerprint: method, path, query parameters, decoded body (canonical JSON, form fields, or bytes by its Content-Type)
- Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing
- Downstream keys: charge: UUID v8 of (scope, key, generation, \"charge\"), charged: UUID v8 of (scope, key, generation, \"charged\"), receipt_queued: UUID v8 of (scope, key, generation, \"receipt_queued\")
- Tests: concurrency, replay, mismatch, missing key, transient failure, crash-resume, expiry"
    );
    assert_eq!(
        section("POST /webhooks/github"),
        "## Idempotency for POST /webhooks/github
- Mechanism: webhook id
- Key scope and retention: sender, 72h
- Fingerprint: signed webhook id and raw body
- Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing
- Downstream keys: none
- Tests: none found"
    );
    assert_eq!(
        section("POST /invoices"),
        "## Idempotency for POST /invoices
- Mechanism: Idempotency-Key table (IdempotencyLayer)
- Key scope and retention: account, 48h
- Fingerprint: method, path, query parameters, decoded body (canonical JSON, form fields, or bytes by its Content-Type)
- Responses: replay (Idempotent-Replayed: true) / 409 in progress (Retry-After: 1) / 422 mismatch / 400 missing
- Downstream keys: not known from this source
- Tests: none found"
    );
    assert_eq!(
        section("PUT /carts/{id}"),
        "## Idempotency for PUT /carts/{id}\n- Mechanism: exempt: PUT by the client's cart id\n- Tests: none found"
    );
    assert_eq!(
        section("DELETE /carts/{id}"),
        "## Idempotency for DELETE /carts/{id}\n- Mechanism: none\n- Tests: none found"
    );
    assert_eq!(
        section("? /extra"),
        "## Idempotency for ? /extra\n- Mechanism: unresolved (the handler could not be read)\n- Tests: none found"
    );
}

#[test]
fn deny_unprotected_fails_naming_each_unprotected_route() {
    let run = idem_in(&fixtures(), &["audit", "--deny-unprotected", "audit-axum"]);
    assert_eq!(run.0.status.code(), Some(1), "{}", run.stderr());
    // The table is still printed for the CI log.
    assert_eq!(run.stdout(), AXUM_TABLE);
    assert_eq!(
        run.stderr(),
        "\
idem: unprotected route POST /admin/refunds (refund) at audit-axum/src/admin.rs:22: none (suggestion: phased form with derived keys)
idem: unprotected route PATCH /admin/users/{id} (patch_user) at audit-axum/src/admin.rs:27: none (suggestion: Idempotency-Key table)
idem: unprotected route DELETE /carts/{id} (delete_cart) at audit-axum/src/main.rs:27: none (suggestion: client-generated id)
idem: unprotected route ? /extra (handler not readable) at audit-axum/src/main.rs:63: unresolved: the route is passed through the variable `extra`
idem: unprotected route POST /inline (handler not readable) at audit-axum/src/main.rs:64: unresolved: the handler is a closure
idem: unprotected route ? /partners (handler not readable) at audit-axum/src/main.rs:66: unresolved: a router built by a function the sources do not hold
idem: 6 of 12 mutating routes are unprotected (--deny-unprotected)
"
    );
    // Without the flag the same routes are a report, not a failure.
    let run = idem_in(&fixtures(), &["audit", "audit-axum"]);
    assert_eq!(run.0.status.code(), Some(0));
}

#[test]
fn deny_unprotected_passes_when_every_route_is_protected_or_exempt() {
    let dir = std::env::temp_dir().join(format!("idem-audit-protected-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        r#"
        #[idem::axum::idempotent(scope = account)]
        async fn create(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) {}
        #[idem::exempt("PUT by the client's id")]
        async fn replace() {}
        async fn read() {}
        fn app() -> axum::Router {
            axum::Router::new().route("/things", post(create).get(read))
                .route("/things/{id}", put(replace))
        }
        "#,
    )
    .unwrap();
    let run = idem_in(&dir, &["audit", "--deny-unprotected"]);
    let stdout = run.success();
    assert!(
        stdout.ends_with("\n2 mutating routes: 1 idempotent, 1 exempt\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// idem's own examples, as a real application registers its routes: actix-web through an
/// application's own `resource(path, [(Method::POST, web::to(f))])` helper and
/// `configure` closures, axum through handlers stamped out by `macro_rules!`, trait
/// functions returning method routers, and `merge`.
#[test]
fn the_examples_idempotent_routes_are_found_idempotent() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for example in ["orders", "orders-axum"] {
        let json = idem_in(&examples, &["audit", "--format", "json", example]).success();
        let routes = routes(&json);
        let order = route(&routes, "POST", "/orders");
        assert_eq!(order["protection"], "idempotent", "{example}: {order}");
        assert_eq!(order["form"], "single");
        assert_eq!(order["scope"], "account");
        assert_eq!(order["retention"], "24h");
        let payment = route(&routes, "POST", "/payments");
        assert_eq!(payment["protection"], "idempotent", "{example}: {payment}");
        assert_eq!(payment["form"], "phased");
        // The path is a constant of `domain/webhooks.rs`, which the axum binary reaches by
        // `#[path = "../orders/domain/mod.rs"]`.
        let webhook = route(&routes, "POST", "/webhooks/provider");
        assert_eq!(webhook["protection"], "idempotent", "{example}: {webhook}");
        assert_eq!(webhook["key"], "header(\"webhook-id\")");
        assert_eq!(webhook["retention"], "5d");
        // The example's stand-in payment provider is exempt, with its reason.
        let provider = route(&routes, "POST", "/provider/charges");
        assert_eq!(provider["protection"], "exempt", "{example}: {provider}");
        assert_eq!(
            provider["reason"],
            "the provider's natural key: one charge per Idempotency-Key, by a unique constraint"
        );
        // Keys in Redis: the phased form through `Steps`, and the store says so.
        let notification = route(&routes, "POST", "/notifications");
        assert_eq!(
            notification["protection"], "idempotent",
            "{example}: {notification}"
        );
        assert_eq!(notification["form"], "phased");
        assert_eq!(notification["store"], "redis");
        assert_eq!(payment["store"], "database");
        assert_eq!(routes.len(), 5, "{example}: {routes:#?}");
        // So the CI gate passes on them.
        let table = idem_in(&examples, &["audit", "--deny-unprotected", example]).success();
        assert!(
            table.ends_with("\n5 mutating routes: 4 idempotent, 1 exempt\n"),
            "{example}: {table}"
        );
        assert!(
            table.contains("phased, keys in redis"),
            "{example}: {table}"
        );

        let report = idem_in(&examples, &["audit", "--format", "report", example]).success();
        assert!(
            report.contains(
                "- Downstream keys: payment_created: UUID v8 of (scope, key, generation, \"payment_created\"), \
                 charge: UUID v8 of (scope, key, generation, \"charge\"), \
                 charged: UUID v8 of (scope, key, generation, \"charged\"), \
                 receipt_queued: UUID v8 of (scope, key, generation, \"receipt_queued\")\n"
            ),
            "{example}: {report}"
        );
        // The report must not claim a database transaction for the Redis endpoint, and
        // lists its steps' derived keys as the phased form's.
        let notifications = section(&report, "POST /notifications");
        assert!(
            notifications.contains(
                "- Mechanism: steps with recovery points, keys in Redis (no database transaction)\n"
            ),
            "{example}: {notifications}"
        );
        assert!(
            notifications.contains(
                "- Downstream keys: send: UUID v8 of (scope, key, generation, \"send\"), \
                 sent: UUID v8 of (scope, key, generation, \"sent\")\n"
            ),
            "{example}: {notifications}"
        );
        // The example is part of the root crate, whose tests run the harness on it.
        let orders = section(&report, "POST /orders");
        assert!(
            orders.contains(
                "- Tests: concurrency, replay, mismatch, missing key, transient failure, expiry"
            ),
            "{example}: {orders}"
        );
    }
}

/// The report's section of `route` (`"POST /orders"`).
fn section<'r>(report: &'r str, route: &str) -> &'r str {
    let heading = format!("## Idempotency for {route}\n");
    report
        .split("\n\n")
        .find(|section| section.starts_with(&heading))
        .unwrap_or_else(|| panic!("no section for {route}: {report}"))
}

#[test]
fn a_file_that_does_not_parse_is_a_warning_and_the_others_are_read() {
    let dir = std::env::temp_dir().join(format!("idem-audit-broken-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/broken.rs"), "fn half(").unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        "fn app() -> axum::Router { axum::Router::new().route(\"/x\", post(x)) }\nasync fn x() {}\n",
    )
    .unwrap();
    let run = idem_in(&dir, &["audit", "--format", "json", "."]);
    assert!(run.0.status.success());
    let routes = routes(&run.stdout());
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0]["file"], "src/main.rs");
    let stderr = run.stderr();
    assert!(
        stderr.starts_with("idem: warning: cannot parse src/broken.rs:1: "),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_folder_is_a_one_line_error() {
    let message = idem_in(&fixtures(), &["audit", "no-such-app"]).one_line_error();
    assert_eq!(message, "no-such-app: no such file or folder");
}

#[test]
fn the_help_documents_the_json_schema() {
    let help = idem_in(&fixtures(), &["audit", "--help"]).success();
    for line in [
        "protection  idempotent | layer | exempt | none | unresolved",
        "suggestion  none: the mechanism the seed's table suggests",
        "--deny-unprotected",
        "--format <FORMAT>",
    ] {
        assert!(help.contains(line), "{line:?} in {help}");
    }
}
