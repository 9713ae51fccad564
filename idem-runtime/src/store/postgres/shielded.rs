//! Completions with a staged body (`staged.rs`), run in a task of their own so that
//! dropping the request's future cannot stop them halfway.
//!
//! sqlx's `COPY` is not safe to abandon once its end (`CopyDone`) was sent: `finish`
//! then waits for the statement's reply, which sqlx does not count among the replies the
//! connection owes. A future dropped there (the client went away, a timeout around the
//! handler gave up, the server shut down) leaves that reply unread, and the connection
//! goes back to the pool one reply out of step with its server: each statement after
//! reads the reply of the one before, so every later request on it fails (`BEGIN`
//! reports `BeginFailed`) until the pool retires the connection. A `COPY` dropped earlier
//! is safe: sqlx ends it with `CopyFail`, the server's error fails the pool's check, and
//! the connection is closed.
//!
//! In a task, the statements run to their end whatever becomes of the request; if the
//! request is gone, its transaction is then dropped, which rolls it back as before, on a
//! connection in step.

use sqlx::{PgPool, Postgres, Transaction};

use crate::store::{AttemptRef, ClaimRequest, Completion, OwnedResponse, PhaseStore as _};

/// The single-transaction completion of `req`'s key in `txn`, in a task.
pub(super) async fn complete(
    txn: Transaction<'static, Postgres>,
    req: &ClaimRequest<'_>,
    response: OwnedResponse,
) -> (Transaction<'static, Postgres>, sqlx::Result<Completion>) {
    let (scope, key) = (req.scope.to_owned(), req.key.to_owned());
    run(async move {
        let mut txn = txn;
        let completion = super::complete_key(&mut txn, &scope, &key, &response.stored()).await;
        (txn, completion)
    })
    .await
}

/// The phased completion of `attempt` on a connection of `pool`, in a task.
pub(super) async fn complete_phased(
    pool: &PgPool,
    attempt: &AttemptRef<'_>,
    response: OwnedResponse,
) -> sqlx::Result<bool> {
    let pool = pool.clone();
    let (scope, key) = (attempt.scope.to_owned(), attempt.key.to_owned());
    let (fencing_token, lease) = (attempt.fencing_token, attempt.lease);
    run(async move {
        let attempt = AttemptRef {
            scope: &scope,
            key: &key,
            fencing_token,
            lease,
        };
        let mut conn = pool.acquire().await?;
        Postgres::complete_phased(&mut conn, &attempt, &response.stored()).await
    })
    .await
}

/// Runs `work` in a task and waits for it; a panic in it goes on in the caller.
async fn run<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    match tokio::spawn(work).await {
        Ok(done) => done,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Nothing aborts the task; the runtime cancels it only as it shuts down, when
        // this future is not polled again either.
        Err(error) => panic!("the completion's task was cancelled: {error}"),
    }
}
