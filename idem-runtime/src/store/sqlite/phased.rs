//! The phased form's SQL on SQLite: claim with a lease, takeover, phase records, lease
//! changes and the final response, each fenced by the attempt's token.
//!
//! The claim and the takeover run in the request's `BEGIN IMMEDIATE` transaction, so they
//! hold the write lock and nothing comes between their statements. A phase's transaction
//! is a deferred `BEGIN` instead: it takes the write lock at its first write, not while
//! the phase calls another service before writing (which may well write to this very
//! database, like the example's payment provider).

use crate::store::PhaseStore;
use std::time::Duration;

use sqlx::sqlite::SqliteConnection;
use sqlx::{Sqlite, Transaction};

use super::{micros, next_attempt, now, reclaim_expired};
use crate::store::KeyColumns;
use crate::store::{
    AttemptRef, AttemptRow, ClaimRequest, PhaseRecord, PhasedClaim, StoredResponse,
};

/// Draws a fresh token, which doubles as the key's generation, and inserts the key with
/// it and its lease; returns the token if the insert won, no row when the key is held
/// already. One trip to the connection's thread, as the single-transaction claim
/// (`super::CLAIM`).
const CLAIM: &str = concat!(
    "UPDATE idem_attempts SET value = value + 1;
INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, created_at, expires_at,
                       locked_until, generation, fencing_token)
VALUES ($1, $2, $3, $4, $5, ",
    now!(),
    ", ",
    now!(),
    " + $6, ",
    now!(),
    " + $7, (SELECT value FROM idem_attempts),
        (SELECT value FROM idem_attempts))
ON CONFLICT (scope, idem_key) DO NOTHING;
SELECT value FROM idem_attempts WHERE changes() = 1"
);

const SELECT_EXISTING: &str = concat!(
    "SELECT fencing_token, expires_at <= ",
    now!(),
    " AND state = 'completed' AS expired,
       coalesce(locked_until <= ",
    now!(),
    ", 1) AS lease_expired, request_hash,
       method, path, state, response_status, response_headers, response_body, generation
  FROM idem_keys
 WHERE scope = $1 AND idem_key = $2"
);

/// Replaces the token of an attempt whose lease ran out; `$4` is the new token. Holding
/// the write lock, exactly one retry gets here first; the others find the token changed.
/// A retry after the retention resumes the same operation and gives the key a retention
/// again (`$6` from now), so its answer is kept for retries once recorded.
const TAKE_OVER: &str = concat!(
    "UPDATE idem_keys
   SET fencing_token = $4, locked_until = ",
    now!(),
    " + $5, expires_at = max(expires_at, ",
    now!(),
    " + $6)
 WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND fencing_token = $3
   AND (locked_until IS NULL OR locked_until <= ",
    now!(),
    ")
RETURNING generation, fencing_token, recovery_point"
);

const RECORDED_PHASES: &str = "\
SELECT phase, output FROM idem_phases
 WHERE scope = $1 AND idem_key = $2
 ORDER BY recorded_at, phase";

/// Fences, moves the recovery point and renews the lease, at the end of the phase's
/// transaction: a takeover never waits for a slow phase that has not written yet, and the
/// fenced phase's writes roll back with it.
const RECORD_PHASE: &str = concat!(
    "UPDATE idem_keys
   SET recovery_point = $4,
       locked_until = max(coalesce(locked_until, 0), ",
    now!(),
    " + $5)
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING 1"
);

/// `recorded_at` grows strictly within a key even when SQLite's millisecond clock does
/// not move between two phases, so the phases read back in the order they committed.
const INSERT_PHASE: &str = concat!(
    "INSERT INTO idem_phases (scope, idem_key, phase, output, fencing_token, recorded_at)
VALUES ($1, $2, $3, $4, $5, max(",
    now!(),
    ", (SELECT coalesce(max(recorded_at), 0) + 1 FROM idem_phases
                  WHERE scope = $1 AND idem_key = $2)))"
);

const EXTEND_LEASE: &str = concat!(
    "UPDATE idem_keys
   SET locked_until = max(coalesce(locked_until, 0), ",
    now!(),
    " + $4)
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING 1"
);

const RELEASE_LEASE: &str = concat!(
    "UPDATE idem_keys
   SET locked_until = ",
    now!(),
    "
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'"
);

const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $4, response_headers = $5,
       response_body = $6, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING 1";

#[derive(sqlx::FromRow)]
struct Row {
    fencing_token: i64,
    expired: bool,
    lease_expired: bool,
    #[sqlx(flatten)]
    key: KeyColumns,
}

fn fresh(generation: i64, fencing_token: i64) -> AttemptRow {
    AttemptRow {
        generation,
        fencing_token,
        recovery_point: None,
        recorded: Vec::new(),
    }
}

impl PhaseStore for Sqlite {
    async fn claim_phased(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
        lease: Duration,
    ) -> sqlx::Result<PhasedClaim> {
        let inserted: Option<(i64,)> = super::bind_claim(sqlx::query_as(CLAIM), req)
            .bind(micros(lease))
            .fetch_optional(&mut *conn)
            .await?;
        if let Some((token,)) = inserted {
            return Ok(PhasedClaim::Claimed(fresh(token, token)));
        }
        let row: Option<Row> = sqlx::query_as(SELECT_EXISTING)
            .bind(req.scope)
            .bind(req.key)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(row) = row else {
            // The write lock is held: the row that made the insert conflict is still there.
            return Ok(PhasedClaim::Vanished);
        };
        if row.expired {
            // Completed and past its retention: a new request starts over on it.
            if let Some((generation, token)) = reclaim_expired(conn, req, Some(lease)).await? {
                return Ok(PhasedClaim::Claimed(fresh(generation, token)));
            }
        }
        Ok(PhasedClaim::Existing {
            lease_expired: row.lease_expired,
            fencing_token: row.fencing_token,
            key: row.key.into_existing(),
        })
    }

    async fn take_over(
        conn: &mut SqliteConnection,
        req: &ClaimRequest<'_>,
        seen: i64,
        lease: Duration,
    ) -> sqlx::Result<Option<AttemptRow>> {
        let token = next_attempt(&mut *conn).await?;
        let row: Option<(i64, i64, String)> = sqlx::query_as(TAKE_OVER)
            .bind(req.scope)
            .bind(req.key)
            .bind(seen)
            .bind(token)
            .bind(micros(lease))
            .bind(micros(req.retention))
            .fetch_optional(&mut *conn)
            .await?;
        let Some((generation, fencing_token, recovery_point)) = row else {
            return Ok(None);
        };
        let recorded: Vec<(String, String)> = sqlx::query_as(RECORDED_PHASES)
            .bind(req.scope)
            .bind(req.key)
            .fetch_all(&mut *conn)
            .await?;
        // The column reads 'started' until a phase commits; only a recorded phase is a
        // point to recover from.
        let recovery_point = if recorded.is_empty() {
            None
        } else {
            Some(recovery_point)
        };
        Ok(Some(AttemptRow {
            generation,
            fencing_token,
            recovery_point,
            recorded,
        }))
    }

    /// A deferred transaction, so a phase holds the write lock from its first write only.
    async fn begin_phase(pool: &sqlx::SqlitePool) -> sqlx::Result<Transaction<'static, Sqlite>> {
        pool.begin().await
    }

    async fn record_phase(
        conn: &mut SqliteConnection,
        attempt: &AttemptRef<'_>,
        phase: &str,
        output: &str,
    ) -> sqlx::Result<PhaseRecord> {
        let fenced: Option<(i64,)> = sqlx::query_as(RECORD_PHASE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(attempt.fencing_token)
            .bind(phase)
            .bind(micros(attempt.lease))
            .fetch_optional(&mut *conn)
            .await?;
        if fenced.is_none() {
            return Ok(PhaseRecord::TakenOver);
        }
        sqlx::query(INSERT_PHASE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(phase)
            .bind(output)
            .bind(attempt.fencing_token)
            .execute(&mut *conn)
            .await?;
        // Whether the phase's code ended idem's transaction itself cannot be told in SQL on
        // SQLite; if it did, these statements committed on their own and the phase's COMMIT
        // fails, which ends the attempt as a storage failure.
        Ok(PhaseRecord::Recorded)
    }

    async fn extend_lease(
        conn: &mut SqliteConnection,
        attempt: &AttemptRef<'_>,
    ) -> sqlx::Result<bool> {
        let extended: Option<(i64,)> = sqlx::query_as(EXTEND_LEASE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(attempt.fencing_token)
            .bind(micros(attempt.lease))
            .fetch_optional(conn)
            .await?;
        Ok(extended.is_some())
    }

    async fn release_lease(
        conn: &mut SqliteConnection,
        attempt: &AttemptRef<'_>,
    ) -> sqlx::Result<()> {
        sqlx::query(RELEASE_LEASE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(attempt.fencing_token)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn complete_phased(
        conn: &mut SqliteConnection,
        attempt: &AttemptRef<'_>,
        response: &StoredResponse<'_>,
    ) -> sqlx::Result<bool> {
        let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
        let completed: Option<(i64,)> = sqlx::query_as(COMPLETE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(attempt.fencing_token)
            .bind(status)
            .bind(response.headers)
            .bind(response.body)
            .fetch_optional(conn)
            .await?;
        Ok(completed.is_some())
    }
}
