//! What the store reads back for an operator: key statistics and key records, with the
//! helpers that turn both databases' rows into them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What [`key_stats`](crate::admin::key_stats) found.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let stats = idem_runtime::admin::key_stats(&pool).await?;
/// let index_bytes: u64 = stats.indexes.iter().map(|i| i.bytes).sum();
/// println!("{} keys, {} in a lease", stats.total(), stats.in_lease);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStats {
    /// Keys per state (`started`, `completed`), by age; states without keys are absent.
    pub states: Vec<StateCount>,
    /// Keys past their retention and not in a lease: what a sweep now would delete.
    pub deletable: u64,
    /// Keys whose lease (`locked_until`) is still running.
    pub in_lease: u64,
    /// The oldest key in state `started`, if any.
    pub oldest_in_progress: Option<InProgressKey>,
    /// Keys in progress past their retention with no live lease: operations that never
    /// finished and whose clients have not come back. The sweep never deletes them; see
    /// [`stranded_keys`](crate::admin::stranded_keys) and [`resolve_key`](crate::admin::resolve_key).
    pub stranded: u64,
    /// The oldest of them (by `created_at`), if any.
    pub oldest_stranded: Option<InProgressKey>,
    /// The table's heap and TOAST size in bytes (`pg_table_size`), without indexes.
    pub table_bytes: u64,
    /// Each index of the table with its size.
    pub indexes: Vec<IndexSize>,
}

impl KeyStats {
    /// All keys, in every state.
    ///
    /// ```no_run
    /// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// println!("{} keys", idem_runtime::admin::key_stats(&pool).await?.total());
    /// # Ok(())
    /// # }
    /// ```
    pub fn total(&self) -> u64 {
        self.states.iter().map(|s| s.ages.total).sum()
    }
}

/// The keys in one state.
///
/// ```no_run
/// # fn show(count: &idem_runtime::admin::StateCount) {
/// println!("{}: {} in the last hour", count.state, count.ages.last_hour);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCount {
    /// The state: `started` (in progress) or `completed`.
    pub state: String,
    /// How many, by age.
    pub ages: AgeCounts,
}

/// Keys counted by age (time since `created_at`); the buckets add up to `total`.
///
/// ```no_run
/// # fn show(ages: &idem_runtime::admin::AgeCounts) {
/// assert_eq!(ages.total, ages.last_hour + ages.last_day + ages.last_week + ages.older);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgeCounts {
    /// All of them.
    pub total: u64,
    /// Created within the last hour.
    pub last_hour: u64,
    /// Created 1 to 24 hours ago.
    pub last_day: u64,
    /// Created 1 to 7 days ago.
    pub last_week: u64,
    /// Created more than 7 days ago.
    pub older: u64,
}

/// A key in state `started`.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(key) = idem_runtime::admin::key_stats(&pool).await?.oldest_in_progress {
///     println!("{}/{} since {:?}", key.scope, key.key, key.created_at);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InProgressKey {
    /// The key's scope.
    pub scope: String,
    /// The key.
    pub key: String,
    /// How far the request got.
    pub recovery_point: String,
    /// When the key was claimed.
    pub created_at: SystemTime,
    /// End of its lease, if it has one.
    pub locked_until: Option<SystemTime>,
}

/// One index of the key table.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// for index in idem_runtime::admin::key_stats(&pool).await?.indexes {
///     println!("{}: {} bytes", index.name, index.bytes);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexSize {
    /// The index's name, e.g. `idem_keys_expires_at`.
    pub name: String,
    /// Its size on disk in bytes.
    pub bytes: u64,
}

/// How many bytes of a stored body [`inspect_key`](crate::admin::inspect_key) reads.
///
/// ```no_run
/// # async fn show(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// if let Some(record) = idem_runtime::admin::inspect_key(&pool, "1001", "order-7").await? {
///     assert!(record.response_body_head.len() <= idem_runtime::admin::BODY_PREVIEW_BYTES);
/// }
/// # Ok(())
/// # }
/// ```
pub const BODY_PREVIEW_BYTES: usize = 1024;

/// A key row, as [`inspect_key`](crate::admin::inspect_key) reads it.
///
/// ```no_run
/// # fn show(record: &idem_runtime::admin::KeyRecord) {
/// for (name, value) in &record.response_headers {
///     println!("{name}: {}", String::from_utf8_lossy(value));
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRecord {
    /// The key's scope.
    pub scope: String,
    /// The key.
    pub key: String,
    /// `started` (in progress) or `completed`.
    pub state: String,
    /// How far the request got.
    pub recovery_point: String,
    /// SHA-256 of the request the key was claimed for (method, path, body).
    pub fingerprint: Vec<u8>,
    /// Method of that request.
    pub method: String,
    /// Path and query of that request.
    pub path: String,
    /// When the key was claimed.
    pub created_at: SystemTime,
    /// When its retention ends.
    pub expires_at: SystemTime,
    /// End of its lease, if it has one.
    pub locked_until: Option<SystemTime>,
    /// Stored status, once completed.
    pub response_status: Option<u16>,
    /// Stored headers, in order, once completed.
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// Length of the stored body, once completed.
    pub response_body_len: Option<u64>,
    /// The body's first bytes (at most [`BODY_PREVIEW_BYTES`]).
    pub response_body_head: Vec<u8>,
}

/// A key row as both stores' `inspect_key` select it, times in microseconds since the
/// epoch, with the body's length and first bytes.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InspectRow {
    state: String,
    recovery_point: String,
    request_hash: Vec<u8>,
    method: String,
    path: String,
    created_at: i64,
    expires_at: i64,
    locked_until: Option<i64>,
    response_status: Option<i16>,
    response_headers: Option<Vec<u8>>,
    body_len: Option<i64>,
    body_head: Option<Vec<u8>>,
}

/// The operator's view of an [`InspectRow`] of `key` in `scope`.
pub(crate) fn key_record(scope: &str, key: &str, row: InspectRow) -> KeyRecord {
    KeyRecord {
        scope: scope.to_owned(),
        key: key.to_owned(),
        state: row.state,
        recovery_point: row.recovery_point,
        fingerprint: row.request_hash,
        method: row.method,
        path: row.path,
        created_at: from_micros(row.created_at),
        expires_at: from_micros(row.expires_at),
        locked_until: row.locked_until.map(from_micros),
        response_status: row.response_status.and_then(|s| u16::try_from(s).ok()),
        response_headers: row
            .response_headers
            .as_deref()
            .map(split_header_lines)
            .unwrap_or_default(),
        response_body_len: row.body_len.map(count),
        response_body_head: row.body_head.unwrap_or_default(),
    }
}

/// The stored header block as names and values; values stay bytes, as HTTP allows any
/// octet in them.
pub(crate) fn split_header_lines(block: &[u8]) -> Vec<(String, Vec<u8>)> {
    header_lines(block)
        .map(|(name, value)| (String::from_utf8_lossy(name).into_owned(), value.to_vec()))
        .collect()
}

/// Appends one header to a stored header block: HTTP/1 lines, `name: value\r\n` (see
/// the key table's migration). Header values never contain CR or LF, so the encoding is
/// unambiguous and keeps non-UTF-8 bytes.
pub(crate) fn push_header_line(block: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    block.extend_from_slice(name);
    block.extend_from_slice(b": ");
    block.extend_from_slice(value);
    block.extend_from_slice(b"\r\n");
}

/// The `(name, value)` pairs of a stored header block, in order. The one reader of the
/// block, for replays and the operator's view alike: a line ends at LF, with or
/// without the CR before it, and a line without a colon is no header.
pub(crate) fn header_lines(block: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    block.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = line.split_at(colon);
        Some((name, value[1..].trim_ascii_start()))
    })
}

/// A key in progress as both stores' `key_stats` select it, times in microseconds since
/// the epoch.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InProgressRow {
    scope: String,
    idem_key: String,
    recovery_point: String,
    created_at: i64,
    locked_until: Option<i64>,
}

pub(crate) fn in_progress_key(row: InProgressRow) -> InProgressKey {
    InProgressKey {
        scope: row.scope,
        key: row.idem_key,
        recovery_point: row.recovery_point,
        created_at: from_micros(row.created_at),
        locked_until: row.locked_until.map(from_micros),
    }
}

/// One state's counts as both stores' `key_stats` select them.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StateRow {
    state: String,
    total: i64,
    last_hour: i64,
    last_day: i64,
    last_week: i64,
    older: i64,
    deletable: i64,
    in_lease: i64,
    stranded: i64,
}

/// Everything a store's `key_stats` reads, put together into [`KeyStats`] in one place.
#[derive(Debug)]
pub(crate) struct StatsRows {
    pub(crate) states: Vec<StateRow>,
    pub(crate) oldest: Option<InProgressRow>,
    pub(crate) oldest_stranded: Option<InProgressRow>,
    pub(crate) table_bytes: i64,
    /// `(name, bytes)` of each index of the key table.
    pub(crate) indexes: Vec<(String, i64)>,
}

impl From<StatsRows> for KeyStats {
    fn from(rows: StatsRows) -> Self {
        let mut stats = KeyStats {
            states: Vec::with_capacity(rows.states.len()),
            deletable: 0,
            in_lease: 0,
            oldest_in_progress: rows.oldest.map(in_progress_key),
            stranded: 0,
            oldest_stranded: rows.oldest_stranded.map(in_progress_key),
            table_bytes: count(rows.table_bytes),
            indexes: rows
                .indexes
                .into_iter()
                .map(|(name, bytes)| IndexSize {
                    name,
                    bytes: count(bytes),
                })
                .collect(),
        };
        for row in rows.states {
            stats.deletable += count(row.deletable);
            stats.in_lease += count(row.in_lease);
            stats.stranded += count(row.stranded);
            stats.states.push(StateCount {
                state: row.state,
                ages: AgeCounts {
                    total: count(row.total),
                    last_hour: count(row.last_hour),
                    last_day: count(row.last_day),
                    last_week: count(row.last_week),
                    older: count(row.older),
                },
            });
        }
        stats
    }
}

/// Counts and sizes come back as 64-bit integers; none of them is negative.
pub(crate) fn count(value: i64) -> u64 {
    value.unsigned_abs()
}

pub(crate) fn from_micros(micros: i64) -> SystemTime {
    let offset = Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        UNIX_EPOCH + offset
    } else {
        UNIX_EPOCH - offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_split_into_names_and_byte_values() {
        let block = b"location: /orders/7\r\ncontent-type: application/json\r\nx-raw: \xff\r\n";
        assert_eq!(
            split_header_lines(block),
            [
                ("location".to_owned(), b"/orders/7".to_vec()),
                ("content-type".to_owned(), b"application/json".to_vec()),
                ("x-raw".to_owned(), b"\xff".to_vec()),
            ]
        );
        assert!(split_header_lines(b"").is_empty());
    }
}
