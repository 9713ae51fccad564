//! Every failure is one line `idem: <message>` on stderr and exit status 1: no database
//! given or reachable, idem's schema missing or at another version than the binary's.

mod support;

use support::{fresh, idem, idem_on, migrated};

#[test]
fn no_database_url() {
    let message = idem(&["stats"], &[]).one_line_error();
    assert_eq!(
        message,
        "no database given: pass --database-url or set DATABASE_URL"
    );
}

#[test]
fn no_database_reachable() {
    // A free port below the kernel's ephemeral range, where no other test's server (bound
    // to port 0) and no outgoing connection can be given it meanwhile: nothing listens.
    let port = idem_testkit::free_port().expect("a free port");
    let url = format!("postgres://app:secret@127.0.0.1:{port}/shop");
    for command in ["migrate", "stats"] {
        let message = idem(&["--database-url", &url, command], &[]).one_line_error();
        assert!(
            message.starts_with(&format!(
                "cannot connect to postgres://app:***@127.0.0.1:{port}/shop: "
            )),
            "{message}"
        );
        assert!(message.contains("refused"), "the cause is named: {message}");
        assert!(
            !message.contains("secret"),
            "no password in messages: {message}"
        );
    }
}

#[tokio::test]
async fn schema_missing() {
    let (db, _pool) = fresh().await;
    for args in [
        &["stats"][..],
        &["expire", "--once"],
        &["expire", "--once", "--dry-run"],
        &["inspect", "s", "k"],
    ] {
        let message = idem_on(&db, args).one_line_error();
        assert_eq!(
            message,
            "idem's schema is not in this database (no `_idem_migrations` table): run `idem migrate`",
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn schema_of_another_version() {
    let (db, pool) = migrated().await;
    let latest: i64 = sqlx::query_scalar("SELECT max(version) FROM _idem_migrations")
        .fetch_one(&pool)
        .await
        .expect("latest version");

    // A newer idem migrated this database.
    sqlx::query(
        "INSERT INTO _idem_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, 'from the future', true, '\\x00', 0)",
    )
    .bind(latest + 1)
    .execute(&pool)
    .await
    .expect("record a newer migration");
    let expected = format!(
        "idem's schema is at version {}, newer than this idem's {latest}: \
         use the idem CLI of the version that migrated it",
        latest + 1
    );
    assert_eq!(idem_on(&db, &["stats"]).one_line_error(), expected);
    assert_eq!(idem_on(&db, &["migrate"]).one_line_error(), expected);

    // An older one: a migration of this build is not applied yet.
    sqlx::query("DELETE FROM _idem_migrations WHERE version >= $1")
        .bind(latest)
        .execute(&pool)
        .await
        .expect("forget the latest migration");
    let message = idem_on(&db, &["expire", "--once"]).one_line_error();
    assert!(
        message.starts_with("idem's schema is at version ")
            || message.starts_with("idem's schema has no migration applied"),
        "{message}"
    );
    assert!(message.ends_with(": run `idem migrate`"), "{message}");
}
