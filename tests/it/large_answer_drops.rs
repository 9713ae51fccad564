//! A request dropped while its large answer is being staged with `COPY .. FROM STDIN`
//! (`store/postgres/staged.rs`): the client went away, the server shut down, a timeout
//! around the handler gave up. Held in two places, with no sleeps: before the `COPY`
//! starts (another transaction holds the staging table's lock) and after all of its data
//! was sent (a statement trigger the test installs waits for an advisory lock the test
//! holds), which is where sqlx's `finish` waits for the reply. Then the pool's
//! connections must all work (a `COPY` abandoned in `finish` left its connection a reply
//! out of step, and every later statement on it failed), nothing may be left staged, and
//! the key must come out right: the single form's answer rolled back with its writes
//! and a retry executing once, the phased form's answer recorded by its own transaction;
//! either replays after.

use crate::large_support;
use crate::support;

use actix_web::{HttpResponse, web};
use futures_util::future::LocalBoxFuture;
use large_support::answer;
use sqlx::pool::PoolConnection;
use sqlx::{Connection as _, PgPool, Postgres};
use support::app::Account;
use support::{ALICE, Env, Reply, TestApp, post};

/// Above the staging threshold.
const LARGE: usize = 300_001;

/// Writes a row of `effects` in idem's transaction, then answers `LARGE` bytes.
#[idem::idempotent(scope = account)]
async fn single(account: Account, tx: idem::Tx<'_, sqlx::Postgres>) -> HttpResponse {
    let _ = account;
    sqlx::raw_sql("INSERT INTO effects DEFAULT VALUES")
        .execute(&mut *tx)
        .await
        .expect("the effect");
    HttpResponse::Ok().body(answer(LARGE))
}

/// Writes a row of `effects` in a phase, then answers `LARGE` bytes: the phased form
/// stages its answer outside the phase's transaction.
#[idem::idempotent(scope = account, lease = "30s")]
async fn phased(
    account: Account,
    phases: idem::Phases<sqlx::Postgres>,
) -> Result<HttpResponse, idem::phased::PhaseError> {
    let _ = account;
    let body = large_support::phased_effect(&mut phases, LARGE).await?;
    Ok(HttpResponse::Ok().body(body))
}

async fn app(env: &Env) -> TestApp {
    sqlx::raw_sql("CREATE TABLE effects (id bigserial PRIMARY KEY)")
        .execute(&env.pool)
        .await
        .expect("the effects table");
    support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/drops/single", web::post().to(single))
            .route("/test/drops/phased", web::post().to(phased));
    })
    .await
}

async fn effects(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM effects")
        .fetch_one(pool)
        .await
        .expect("count the effects")
}

/// Polls `request` until the database shows it held by `hold`, then drops it there.
async fn drop_when_held(request: LocalBoxFuture<'static, Reply>, env: &Env, hold: &Hold) {
    tokio::select! {
        biased;
        reply = request => panic!("the request was not held: it answered {}", reply.status),
        () = hold.reached(&env.pool) => {}
    }
}

/// Drops a request of `form` at `hold`, then checks what it left: working connections,
/// nothing staged, and what retries find.
async fn dropped_then_retried(form: &str, hold: Hold) {
    let env = Env::new().await;
    let app = app(&env).await;
    let path = format!("/test/drops/{form}");
    hold.install(&env.pool).await;
    let holding = hold.take(&env.pool).await;
    drop_when_held(app.call(post(&path, ALICE, form, "{}")), &env, &hold).await;
    holding.release().await;
    hold.uninstall(&env.pool).await;
    settled(&env.served_pool).await;

    assert_connections_work(&env.served_pool).await;
    assert_eq!(
        staged_rows(&env.pool).await,
        0,
        "{form}: nothing left staged"
    );
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idem_keys WHERE idem_key = $1 AND state = 'completed'",
    )
    .bind(form)
    .fetch_one(&env.pool)
    .await
    .expect("the key's state");
    if form == "single" {
        // The completion ran to its end without the request, then the transaction it is
        // in was dropped: rolled back, the handler's write with it.
        assert_eq!(
            stored, 0,
            "{form}: the dropped request's answer is not stored"
        );
        assert_eq!(effects(&env.pool).await, 0, "{form}: rolled back with it");
        let retry = app.call(post(&path, ALICE, form, "{}")).await;
        assert_eq!(retry.status, 200, "{form}: the retry is answered");
        assert!(!retry.replayed(), "{form}: the retry executes");
        assert_eq!(retry.body, answer(LARGE), "{form}: the retry's answer");
    } else {
        // The phase committed before, and the completion's transaction is its own: it
        // ran to its end without the request, so the answer is kept for the retry.
        assert_eq!(stored, 1, "{form}: the answer was recorded");
        assert_eq!(effects(&env.pool).await, 1, "{form}: the phase is kept");
    }
    assert_eq!(effects(&env.pool).await, 1, "{form}: executed once in all");
    let replay = app.call(post(&path, ALICE, form, "{}")).await;
    assert!(replay.replayed(), "{form}: then replays");
    assert_eq!(replay.body, answer(LARGE), "{form}: byte for byte");
    assert_eq!(
        staged_rows(&env.pool).await,
        0,
        "{form}: nothing staged after"
    );
    assert_connections_work(&env.served_pool).await;
}

#[actix_web::test]
async fn a_request_dropped_while_its_copy_waits_for_the_table() {
    dropped_then_retried("single", Hold::TableLock).await;
}

#[actix_web::test]
async fn a_request_dropped_while_its_copy_finishes() {
    dropped_then_retried("single", Hold::Finish).await;
}

#[actix_web::test]
async fn a_phased_completion_dropped_while_its_copy_waits_for_the_table() {
    dropped_then_retried("phased", Hold::TableLock).await;
}

#[actix_web::test]
async fn a_phased_completion_dropped_while_its_copy_finishes() {
    dropped_then_retried("phased", Hold::Finish).await;
}

/// Where a request's `COPY` is held.
#[derive(Clone, Copy, Debug)]
enum Hold {
    /// Before it starts: the staging table is locked by another transaction, and the
    /// `COPY` waits for the lock before it asks for data.
    TableLock,
    /// After its last byte and its end were sent, while sqlx waits for its answer: a
    /// statement trigger on the staging table waits for an advisory lock the test holds.
    Finish,
}

/// The advisory lock `Hold::Finish`'s trigger waits for.
const FINISH_LOCK: i64 = 72_404;

impl Hold {
    async fn install(self, pool: &PgPool) {
        if let Self::Finish = self {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "CREATE FUNCTION hold_staging() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM pg_advisory_xact_lock_shared({FINISH_LOCK}); RETURN NULL; END $$;
                 CREATE TRIGGER hold_staging AFTER INSERT ON idem_staged_bodies
                     FOR EACH STATEMENT EXECUTE FUNCTION hold_staging();"
            )))
            .execute(pool)
            .await
            .expect("install the trigger");
        }
    }

    async fn uninstall(self, pool: &PgPool) {
        if let Self::Finish = self {
            sqlx::raw_sql("DROP TRIGGER hold_staging ON idem_staged_bodies")
                .execute(pool)
                .await
                .expect("drop the trigger");
        }
    }

    /// Takes the lock that holds a `COPY`, on a connection of the test's own.
    async fn take(self, pool: &PgPool) -> Holding {
        let mut conn = pool.acquire().await.expect("a connection for the lock");
        let take = match self {
            Self::TableLock => {
                "BEGIN; LOCK TABLE idem_staged_bodies IN ACCESS EXCLUSIVE MODE".into()
            }
            Self::Finish => format!("SELECT pg_advisory_lock({FINISH_LOCK})"),
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(take))
            .execute(&mut *conn)
            .await
            .expect("take the lock");
        Holding { hold: self, conn }
    }

    /// Returns once a statement waits for the lock: the request's `COPY`.
    async fn reached(self, pool: &PgPool) {
        let waiting = match self {
            Self::TableLock => {
                "SELECT count(*) FROM pg_locks \
                  WHERE NOT granted AND relation = 'idem_staged_bodies'::regclass"
            }
            Self::Finish => {
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'"
            }
        };
        for _ in 0..100_000 {
            let waiting: i64 = sqlx::query_scalar(waiting)
                .fetch_one(pool)
                .await
                .expect("read pg_locks");
            if waiting > 0 {
                return;
            }
        }
        panic!("no COPY came to wait for {self:?}");
    }
}

/// A lock taken by [`Hold::take`].
struct Holding {
    hold: Hold,
    conn: PoolConnection<Postgres>,
}

impl Holding {
    async fn release(mut self) {
        let release = match self.hold {
            Hold::TableLock => "COMMIT".into(),
            Hold::Finish => format!("SELECT pg_advisory_unlock({FINISH_LOCK})"),
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(release))
            .execute(&mut *self.conn)
            .await
            .expect("release the lock");
    }
}

async fn staged_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM idem_staged_bodies")
        .fetch_one(pool)
        .await
        .expect("the staging table")
}

/// Waits until every connection of `pool` is back in it: sqlx returns a connection in a
/// task of its own, which first flushes what the dropped request left queued and reads
/// its answers. Bounded, so that one that never comes back fails the test.
async fn settled(pool: &PgPool) {
    for _ in 0..10_000 {
        if pool.num_idle() == pool.size() as usize {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("the pool's connections did not come back");
}

/// Holds every connection `pool` may open at once, and on each one runs statements whose
/// answers tell one from another: a connection left out of step with its server would
/// answer one of them with another's result, or fail.
async fn assert_connections_work(pool: &PgPool) {
    let max = pool.options().get_max_connections();
    let mut held = Vec::new();
    for _ in 0..max {
        held.push(pool.acquire().await.expect("a connection"));
    }
    for (i, conn) in held.iter_mut().enumerate() {
        for round in 0..3_i64 {
            let expected = i as i64 * 10 + round;
            // In a transaction, so that a transaction pooler keeps the prepared
            // statement on one server connection.
            let mut tx = conn.begin().await.expect("BEGIN");
            let got: i64 = sqlx::query_scalar("SELECT $1::int8")
                .bind(expected)
                .fetch_one(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            assert_eq!(got, expected, "connection {i} answered another statement");
            let (simple,): (String,) = sqlx::query_as::<_, (String,)>("SELECT 'simple'")
                .fetch_one(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            assert_eq!(simple, "simple", "connection {i}");
            tx.commit().await.expect("COMMIT");
        }
    }
}
