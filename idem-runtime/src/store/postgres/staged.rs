//! A large stored body sent to PostgreSQL with `COPY .. FROM STDIN` in chunks, rather
//! than bound as a parameter of the completion's `UPDATE`. sqlx copies a bound value into
//! the statement's arguments and then encodes the whole `Bind` message into the
//! connection's write buffer, which grows to twice the body's size (the `Execute` and
//! `Sync` after a 1 MiB `Bind` double it): three copies of the body alive at once beside
//! the handler's own, per request, while the completion runs. A `CopyData` message is
//! written from the caller's slice and flushed before the next one, so the write buffer
//! holds one chunk at a time and there are no arguments.
//!
//! The body lands in `idem_staged_bodies` under a fresh nonce, and the completion's
//! statement takes it from there (`DELETE .. RETURNING` in a `WITH`) in the same
//! transaction, so the table is empty whenever no completion is under way. A small body
//! is bound as before: two more round trips (the `COPY` and its end) would cost more than
//! the copies they save.

use std::hash::{BuildHasher, RandomState};

use sqlx::postgres::PgConnection;

/// Bodies longer than this are staged; shorter ones are bound. At this size the bound
/// copies are a few hundred KiB per request at most.
pub(super) const STAGE_ABOVE: usize = 64 * 1024;

/// The size of each `CopyData` message, and so about the largest the write buffer gets.
const CHUNK: usize = 64 * 1024;

/// Binary format: the fields are sent as PostgreSQL stores them, with no escaping of the
/// body (text format would double most bytes of a binary body).
const COPY: &str = "COPY idem_staged_bodies (scope, nonce, body) FROM STDIN (FORMAT binary)";

/// The binary format's signature, flags and header extension length.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The binary format's end: a tuple of -1 fields.
const TRAILER: [u8; 2] = (-1i16).to_be_bytes();

/// Sends `body` to `idem_staged_bodies` and returns the nonce the completion takes it by.
/// On `conn`'s transaction, if it is in one: the row is then rolled back with it.
pub(super) async fn stage(conn: &mut PgConnection, scope: &str, body: &[u8]) -> sqlx::Result<i64> {
    let nonce = fresh_nonce();
    let mut head = Vec::with_capacity(HEADER.len() + 2 + 4 + scope.len() + 4 + 8 + 4);
    head.extend_from_slice(HEADER);
    head.extend_from_slice(&3i16.to_be_bytes());
    put_field(&mut head, scope.as_bytes())?;
    put_field(&mut head, &nonce.to_be_bytes())?;
    head.extend_from_slice(&field_len(body.len())?.to_be_bytes());

    let mut copy = conn.copy_in_raw(COPY).await?;
    // On an error `copy` is dropped, which ends the COPY with a failure: the statement
    // and the transaction it is in fail, and nothing is staged.
    copy.send(head.as_slice()).await?;
    for chunk in body.chunks(CHUNK) {
        copy.send(chunk).await?;
    }
    copy.send(TRAILER.as_slice()).await?;
    copy.finish().await?;
    Ok(nonce)
}

fn put_field(out: &mut Vec<u8>, value: &[u8]) -> sqlx::Result<()> {
    out.extend_from_slice(&field_len(value.len())?.to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
}

fn field_len(len: usize) -> sqlx::Result<i32> {
    // A bytea holds at most 1 GiB, so PostgreSQL would refuse a longer body anyway.
    i32::try_from(len).map_err(|_| sqlx::Error::Encode("a stored body over 2 GiB".into()))
}

/// A number no other staged row uses: one completion's row is told from another's, and
/// from any left behind (see the migration), by it. `RandomState` is seeded at random
/// once per thread and advances with each new state, so each call hashes under new keys.
/// A collision would fail the completion on the primary key, never mix two bodies.
fn fresh_nonce() -> i64 {
    i64::from_ne_bytes(
        RandomState::new()
            .hash_one(std::process::id())
            .to_ne_bytes(),
    )
}
