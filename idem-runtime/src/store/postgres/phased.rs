//! The phased form's SQL: claim with a lease, takeover, phase records, lease changes and
//! the final response, each fenced by the attempt's token.
//!
//! Lease times use `clock_timestamp()`, not `now()`: `now()` is the start of the
//! transaction, and a phase's transaction may have been open for most of a lease when
//! it renews it. All times come from the database's clock, so the application servers'
//! clocks never meet.

use super::own_transaction;
use crate::store::PhaseStore;
use std::time::Duration;

use sqlx::Row as _;
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::{Postgres, SqlSafeStr as _, Transaction};

use super::record::ExistingRecord;
use crate::store::KeyColumns;
use crate::store::{AttemptRef, AttemptRow, ClaimRequest, OwnedResponse, PhaseRecord, PhasedClaim};

/// Inserts the key with its lease, or returns the row that holds it. A fresh key's first
/// fencing token doubles as its generation. As in the single-transaction claim, a row
/// committed while this insert waited is not in its snapshot and is read again after,
/// the token is drawn beside the lock timeout in `cfg` rather than in a CTE of its own
/// (one scan node fewer to set up on every execution), and the existing row comes back
/// as one record beside its generation, token and body (four columns, not twelve).
const CLAIM: &str = concat!(
    "WITH cfg AS MATERIALIZED (",
    super::claim_lock_timeout!("$8"),
    ", nextval('idem_attempts') AS v),
ins AS (
    INSERT INTO idem_keys (scope, idem_key, request_hash, method, path, expires_at,
                           locked_until, generation, fencing_token)
    SELECT $1, $2, $3, $4, $5, now() + $6, clock_timestamp() + $7, v, v FROM cfg
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING generation, fencing_token
)
SELECT generation, fencing_token, NULL::record AS existing, NULL::bytea AS response_body
  FROM ins
UNION ALL
SELECT k.generation, k.fencing_token,
       ROW(k.expires_at <= now() AND k.state = 'completed',
           coalesce(k.locked_until <= clock_timestamp(), true), k.request_hash, k.method,
           k.path, k.state, k.response_status, k.response_headers),
       k.response_body
  FROM idem_keys k
 WHERE k.scope = $1 AND k.idem_key = $2 AND NOT EXISTS (SELECT FROM ins)"
);

/// The row that holds the key, in the claim's shape.
const SELECT_EXISTING: &str = "\
SELECT generation, fencing_token,
       ROW(expires_at <= now() AND state = 'completed',
           coalesce(locked_until <= clock_timestamp(), true), request_hash, method, path,
           state, response_status, response_headers) AS existing,
       response_body
  FROM idem_keys
 WHERE scope = $1 AND idem_key = $2";

/// Starts a new generation on a completed key whose retention ended. The old
/// generation's phases go with it: they belong to another request. A `started` key is
/// never reclaimed: its retry takes the attempt over instead ([`TAKE_OVER`]), keeping its
/// generation, so committed phases never run again and derived keys never change.
const RECLAIM_EXPIRED: &str = "\
WITH t AS (SELECT nextval('idem_attempts') AS v),
k AS (
    UPDATE idem_keys
       SET request_hash = $3, method = $4, path = $5, state = 'started',
           recovery_point = 'started', locked_until = clock_timestamp() + $7,
           response_status = NULL, response_headers = NULL, response_body = NULL,
           created_at = now(), expires_at = now() + $6, generation = t.v, fencing_token = t.v
      FROM t
     WHERE scope = $1 AND idem_key = $2 AND expires_at <= now() AND state = 'completed'
    RETURNING generation, fencing_token
),
gone AS (
    DELETE FROM idem_phases p USING k WHERE p.scope = $1 AND p.idem_key = $2
)
SELECT generation, fencing_token FROM k";

/// Replaces the token of an attempt whose lease ran out. Of two retries racing here, the
/// second waits for the first's row lock, then finds the token changed (or the lease
/// live again) and matches nothing: exactly one wins.
///
/// A retry that comes after the retention resumes the same operation and gives the key
/// a retention again (`$5` from now), so that its answer, once recorded, is kept for
/// retries rather than deleted by the next sweep.
const TAKE_OVER: &str = "\
UPDATE idem_keys
   SET fencing_token = nextval('idem_attempts'), locked_until = clock_timestamp() + $4,
       expires_at = greatest(expires_at, now() + $5)
 WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND fencing_token = $3
   AND (locked_until IS NULL OR locked_until <= clock_timestamp())
RETURNING generation, fencing_token, recovery_point";

/// Read after the takeover's UPDATE, so in a snapshot taken with the key row locked: every
/// phase recorded before is visible, and none can be recorded by the old attempt after.
const RECORDED_PHASES: &str = "\
SELECT phase, output::text FROM idem_phases
 WHERE scope = $1 AND idem_key = $2
 ORDER BY recorded_at, phase";

/// Marks the start of a phase's transaction, so the record can tell whether the phase's
/// code ended the transaction itself. READ COMMITTED like the request's (see
/// `super::BEGIN`): the fenced record must see a takeover that committed meanwhile and
/// match no row, not fail to serialize.
const BEGIN_PHASE: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT set_config('idem.phase', 'on', true)";

/// Fences, moves the recovery point, renews the lease and records the output, in one
/// round trip at the end of the phase's transaction. Checking the token last (not first)
/// means a takeover never waits for a slow phase: the slow phase finds itself fenced
/// here and its writes roll back with it.
const RECORD_PHASE: &str = "\
WITH k AS (
    UPDATE idem_keys
       SET recovery_point = $4,
           locked_until = greatest(locked_until, clock_timestamp() + $5)
     WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
       AND coalesce(current_setting('idem.phase', true), '') = 'on'
    RETURNING scope, idem_key
),
ins AS (
    INSERT INTO idem_phases (scope, idem_key, phase, output, fencing_token)
    SELECT scope, idem_key, $4, $6::json, $3 FROM k
    RETURNING 1
)
SELECT EXISTS (SELECT FROM ins),
       coalesce(current_setting('idem.phase', true), '') = 'on'";

const EXTEND_LEASE: &str = "\
UPDATE idem_keys
   SET locked_until = greatest(locked_until, clock_timestamp() + $4)
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING true";

const RELEASE_LEASE: &str = "\
UPDATE idem_keys
   SET locked_until = clock_timestamp()
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'";

const COMPLETE: &str = "\
UPDATE idem_keys
   SET state = 'completed', response_status = $4, response_headers = $5,
       response_body = $6, locked_until = NULL
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING true";

/// [`COMPLETE`] for a staged body (`super::staged`): $6 is the staged row's nonce. A
/// fenced-out attempt's row goes too.
const COMPLETE_STAGED: &str = "\
WITH staged AS (
    DELETE FROM idem_staged_bodies WHERE scope = $1 AND nonce = $6 RETURNING body
)
UPDATE idem_keys
   SET state = 'completed', response_status = $4, response_headers = $5,
       response_body = (SELECT body FROM staged), locked_until = NULL
 WHERE scope = $1 AND idem_key = $2 AND fencing_token = $3 AND state = 'started'
RETURNING true";

struct Row {
    claimed: bool,
    fencing_token: i64,
    expired: bool,
    lease_expired: bool,
    key: KeyColumns,
}

impl<'r> sqlx::FromRow<'r, PgRow> for Row {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        let generation: i64 = row.try_get(0)?;
        let fencing_token: i64 = row.try_get(1)?;
        let Some(existing) = row.try_get::<Option<ExistingRecord<2>>, _>(2)? else {
            // The insert won: only the generation and the token are of interest.
            return Ok(Self {
                claimed: true,
                fencing_token,
                expired: false,
                lease_expired: false,
                key: KeyColumns::claimed(generation),
            });
        };
        let [expired, lease_expired] = existing.flags;
        Ok(Self {
            claimed: false,
            fencing_token,
            expired,
            lease_expired,
            key: existing.into_key(generation, row.try_get(3)?),
        })
    }
}

impl Row {
    fn into_claim(self) -> PhasedClaim {
        if self.claimed {
            return PhasedClaim::Claimed(fresh(self.key.generation, self.fencing_token));
        }
        PhasedClaim::Existing {
            lease_expired: self.lease_expired,
            fencing_token: self.fencing_token,
            key: self.key.into_existing(),
        }
    }

    /// Past its retention with no live attempt: a new request may start over on it.
    fn reclaimable(&self) -> bool {
        self.expired && self.lease_expired
    }
}

fn fresh(generation: i64, fencing_token: i64) -> AttemptRow {
    AttemptRow {
        generation,
        fencing_token,
        recovery_point: None,
        recorded: Vec::new(),
    }
}

impl PhaseStore for Postgres {
    async fn claim_phased(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
        lease: Duration,
    ) -> sqlx::Result<PhasedClaim> {
        let row = bind_request(sqlx::query_as::<_, Row>(CLAIM), req, lease)
            .bind(super::claim_wait_ms(req))
            .fetch_optional(&mut *conn)
            .await?;
        match row {
            Some(row) if !row.reclaimable() => return Ok(claimed_or_existing(conn, row)),
            Some(_) | None => {}
        }
        // Expired, or committed by its holder while we waited: look again with a fresh
        // snapshot, as the single-transaction claim does.
        for _ in 0..2 {
            if let Some(attempt) = reclaim_expired(conn, req, lease).await? {
                return Ok(PhasedClaim::Claimed(attempt));
            }
            let row = sqlx::query_as::<_, Row>(SELECT_EXISTING)
                .bind(req.scope)
                .bind(req.key)
                .fetch_optional(&mut *conn)
                .await?;
            match row {
                Some(row) if !row.reclaimable() => return Ok(claimed_or_existing(conn, row)),
                Some(_) => continue,
                None => break,
            }
        }
        Ok(PhasedClaim::Vanished)
    }

    async fn take_over(
        conn: &mut PgConnection,
        req: &ClaimRequest<'_>,
        seen: i64,
        lease: Duration,
    ) -> sqlx::Result<Option<AttemptRow>> {
        let row: Option<(i64, i64, String)> = sqlx::query_as(TAKE_OVER)
            .bind(req.scope)
            .bind(req.key)
            .bind(seen)
            .bind(lease)
            .bind(req.retention)
            .fetch_optional(&mut *conn)
            .await?;
        let Some((generation, fencing_token, recovery_point)) = row else {
            return Ok(None);
        };
        let recorded = sqlx::query_as(RECORDED_PHASES)
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

    async fn begin_phase(pool: &sqlx::PgPool) -> sqlx::Result<Transaction<'static, Postgres>> {
        // Both safe to drop: see `Backend::begin` for why `BEGIN` is.
        Transaction::begin(pool.acquire().await?, Some(BEGIN_PHASE.into_sql_str())).await
    }

    async fn record_phase(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
        phase: &str,
        output: &str,
    ) -> sqlx::Result<PhaseRecord> {
        let (recorded, in_transaction): (bool, bool) = sqlx::query_as(RECORD_PHASE)
            .bind(attempt.scope)
            .bind(attempt.key)
            .bind(attempt.fencing_token)
            .bind(phase)
            .bind(attempt.lease)
            .bind(output)
            .fetch_one(conn)
            .await?;
        Ok(match (recorded, in_transaction) {
            (true, _) => PhaseRecord::Recorded,
            (false, true) => PhaseRecord::TakenOver,
            (false, false) => PhaseRecord::TransactionEnded,
        })
    }

    async fn extend_lease(conn: &mut PgConnection, attempt: &AttemptRef<'_>) -> sqlx::Result<bool> {
        own_transaction!(conn, {
            let extended: Option<bool> = sqlx::query_scalar(EXTEND_LEASE)
                .bind(attempt.scope)
                .bind(attempt.key)
                .bind(attempt.fencing_token)
                .bind(attempt.lease)
                .fetch_optional(conn)
                .await?;
            Ok(extended.is_some())
        })
    }

    async fn release_lease(conn: &mut PgConnection, attempt: &AttemptRef<'_>) -> sqlx::Result<()> {
        own_transaction!(conn, {
            sqlx::query(RELEASE_LEASE)
                .bind(attempt.scope)
                .bind(attempt.key)
                .bind(attempt.fencing_token)
                .execute(conn)
                .await?;
            Ok(())
        })
    }

    async fn complete_phased(
        conn: &mut PgConnection,
        attempt: &AttemptRef<'_>,
        response: &crate::store::StoredResponse<'_>,
    ) -> sqlx::Result<bool> {
        if response.body.len() > super::staged::STAGE_ABOVE {
            return complete_staged(conn, attempt, response).await;
        }
        own_transaction!(conn, {
            let completed: Option<bool> = completion(COMPLETE, attempt, response)
                .bind(response.body)
                .fetch_optional(&mut *conn)
                .await?;
            super::shrink_after(conn, response.headers.len() + response.body.len());
            Ok(completed.is_some())
        })
    }

    /// A staged body's completion runs in a task of its own (`super::shielded`).
    async fn complete_phased_shielded(
        pool: &sqlx::PgPool,
        attempt: &AttemptRef<'_>,
        response: OwnedResponse,
    ) -> sqlx::Result<bool> {
        if response.body.len() > super::staged::STAGE_ABOVE {
            return super::shielded::complete_phased(pool, attempt, response).await;
        }
        let mut conn = pool.acquire().await?;
        Self::complete_phased(&mut conn, attempt, &response.stored()).await
    }
}

/// The phased completion of a large body: staged, then stored, in a transaction of its
/// own on any connection (a savepoint if `conn` is in one), so that no staged row is
/// left behind if the process stops between the two statements.
async fn complete_staged(
    conn: &mut PgConnection,
    attempt: &AttemptRef<'_>,
    response: &crate::store::StoredResponse<'_>,
) -> sqlx::Result<bool> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let nonce = super::staged::stage(&mut tx, attempt.scope, response.body).await?;
    let completed: Option<bool> = completion(COMPLETE_STAGED, attempt, response)
        .bind(nonce)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    super::shrink_after(conn, response.headers.len() + response.body.len());
    Ok(completed.is_some())
}

/// [`COMPLETE`] or [`COMPLETE_STAGED`] with $1..$5 bound; $6 is the body or the nonce it
/// was staged under.
fn completion<'q>(
    sql: &'static str,
    attempt: &'q AttemptRef<'_>,
    response: &'q crate::store::StoredResponse<'_>,
) -> sqlx::query::QueryScalar<'q, Postgres, bool, PgArguments> {
    let status = i16::try_from(response.status).expect("HTTP status codes fit in i16");
    sqlx::query_scalar(sql)
        .bind(attempt.scope)
        .bind(attempt.key)
        .bind(attempt.fencing_token)
        .bind(status)
        .bind(response.headers)
}

/// The claim's answer; an existing key's stored answer may have grown the connection's
/// read buffer, which is given back as the single-transaction claim does.
fn claimed_or_existing(conn: &mut PgConnection, row: Row) -> PhasedClaim {
    if !row.claimed {
        super::shrink_after(conn, row.key.stored_len());
    }
    row.into_claim()
}

async fn reclaim_expired(
    conn: &mut PgConnection,
    req: &ClaimRequest<'_>,
    lease: Duration,
) -> sqlx::Result<Option<AttemptRow>> {
    let row: Option<(i64, i64)> = bind_request(sqlx::query_as(RECLAIM_EXPIRED), req, lease)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(|(generation, token)| fresh(generation, token)))
}

/// Binds $1..$7: the claim's six values and the lease.
fn bind_request<'q, O>(
    query: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
    req: &'q ClaimRequest<'_>,
    lease: Duration,
) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
    super::bind_claim(query, req).bind(lease)
}
