//! Shared by the CLI tests: the built `idem` binary run against a fresh database, and
//! key rows written straight into `idem_keys`.
#![allow(dead_code)]

use std::process::{Command, Output};

use idem_testkit::TestDb;
use sqlx::PgPool;

/// The `idem` binary of this build.
pub(crate) const IDEM: &str = env!("CARGO_BIN_EXE_idem");

/// Runs `idem` with `args` and only the environment given (no `DATABASE_URL` from the
/// test's own environment leaks in).
pub(crate) fn idem(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(IDEM);
    command.args(args).env_remove("DATABASE_URL");
    for (name, value) in env {
        command.env(name, value);
    }
    Run(command.output().expect("run the idem binary"))
}

/// `idem --database-url <db> args..`.
pub(crate) fn idem_on(db: &TestDb, args: &[&str]) -> Run {
    let mut all = vec!["--database-url", db.url()];
    all.extend_from_slice(args);
    idem(&all, &[])
}

/// A finished run of the binary.
#[derive(Debug)]
pub(crate) struct Run(pub(crate) Output);

impl Run {
    pub(crate) fn stdout(&self) -> String {
        String::from_utf8(self.0.stdout.clone()).expect("stdout is UTF-8")
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8(self.0.stderr.clone()).expect("stderr is UTF-8")
    }

    /// Asserts success with nothing on stderr; returns stdout.
    pub(crate) fn success(&self) -> String {
        assert!(
            self.0.status.success(),
            "idem failed ({}): {}{}",
            self.0.status,
            self.stdout(),
            self.stderr()
        );
        assert_eq!(self.stderr(), "", "nothing on stderr");
        self.stdout()
    }

    /// Asserts the error contract: exit status 1, nothing on stdout, and exactly one line
    /// `idem: <message>` on stderr; returns the message.
    pub(crate) fn one_line_error(&self) -> String {
        assert_eq!(
            self.0.status.code(),
            Some(1),
            "exit status; stdout: {} stderr: {}",
            self.stdout(),
            self.stderr()
        );
        assert_eq!(self.stdout(), "", "nothing on stdout");
        let stderr = self.stderr();
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {stderr:?}");
        lines[0]
            .strip_prefix("idem: ")
            .unwrap_or_else(|| panic!("the line starts with `idem: `: {stderr:?}"))
            .to_owned()
    }
}

/// A fresh database, and a pool to it for the test's own queries.
pub(crate) async fn fresh() -> (TestDb, PgPool) {
    let db = TestDb::new().await;
    let pool = db.pool(2).await;
    (db, pool)
}

/// A fresh database with idem's schema, applied by the runtime (not the CLI).
pub(crate) async fn migrated() -> (TestDb, PgPool) {
    let (db, pool) = fresh().await;
    idem_runtime::migrate(&pool)
        .await
        .expect("idem's migrations");
    (db, pool)
}

/// Inserts `n` completed keys `<prefix>-1` .. `<prefix>-n` in scope `s`, created
/// `age_secs` ago, whose retention ends `expires_in` seconds from now.
pub(crate) async fn insert_completed(
    pool: &PgPool,
    prefix: &str,
    n: i64,
    age_secs: i64,
    expires_in: i64,
) {
    sqlx::query(
        "INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state,
                                response_status, response_headers, response_body,
                                created_at, expires_at)
         SELECT 's', $1 || '-' || g, sha256(g::text::bytea), 'POST', '/orders', 'completed',
                201, '\\x'::bytea, '{}'::bytea, now() - make_interval(secs => $2),
                now() + make_interval(secs => $3)
           FROM generate_series(1, $4) g",
    )
    .bind(prefix)
    .bind(age_secs as f64)
    .bind(expires_in as f64)
    .bind(n)
    .execute(pool)
    .await
    .unwrap_or_else(|e| panic!("insert {prefix}-*: {e}"));
}

/// Inserts one key in progress, created `age_secs` ago, with a lease for `lease_secs`
/// more and retention already over.
pub(crate) async fn insert_in_progress(
    pool: &PgPool,
    scope: &str,
    key: &str,
    age_secs: i64,
    lease_secs: i64,
) {
    sqlx::query(
        "INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, state,
                                recovery_point, locked_until, created_at, expires_at)
         VALUES ($1, $2, sha256('x'), 'POST', '/payments', 'started', 'charged',
                 now() + make_interval(secs => $4), now() - make_interval(secs => $3),
                 now() - interval '1 second')",
    )
    .bind(scope)
    .bind(key)
    .bind(age_secs as f64)
    .bind(lease_secs as f64)
    .execute(pool)
    .await
    .expect("insert a key in progress");
}

/// Rows left in `idem_keys` whose key starts with `<prefix>-`.
pub(crate) async fn left(pool: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM idem_keys WHERE idem_key LIKE $1 || '-%'")
        .bind(prefix)
        .fetch_one(pool)
        .await
        .expect("count keys")
}
