//! `idem migrate` applies idem's schema to a database, once; repeating it changes nothing.

mod support;

use support::{fresh, idem, idem_on};

#[tokio::test]
async fn migrate_applies_the_schema_once() {
    let (db, pool) = fresh().await;
    let out = idem_on(&db, &["migrate"]).success();
    assert!(
        out.starts_with("applied idem's schema; now at version "),
        "{out}"
    );
    assert_eq!(
        idem_runtime::admin::schema_status(&pool)
            .await
            .expect("status"),
        idem_runtime::admin::SchemaStatus::Current {
            version: out
                .trim()
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a version number")
        }
    );
    let table: Option<String> = sqlx::query_scalar("SELECT to_regclass('idem_keys')::text")
        .fetch_one(&pool)
        .await
        .expect("look up idem_keys");
    assert_eq!(table.as_deref(), Some("idem_keys"));

    let again = idem_on(&db, &["migrate"]).success();
    assert!(again.contains("nothing to apply"), "{again}");
}

#[tokio::test]
async fn the_url_may_come_from_database_url() {
    let (db, pool) = fresh().await;
    idem(&["migrate"], &[("DATABASE_URL", db.url())]).success();
    assert!(
        idem_runtime::admin::schema_status(&pool)
            .await
            .expect("status")
            .is_current()
    );
}
