//! The operator's view of idem's keys in Redis, as `idem stats` and `idem inspect` show
//! the relational stores': counts by state and age, leases, and one key with its answer.
//!
//! Redis expires the keys itself, so there is nothing "due for deletion" and no key
//! outlives its retention. Times are the server's (`TIME`), as the scripts' are.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::{ConnectionAddr, Value, from_redis_value};

use super::keys::KeyNames;
use super::{RedisStore, RedisStoreError};
use crate::store::records::split_header_lines;
use crate::store::{AgeCounts, BODY_PREVIEW_BYTES, InProgressKey, KeyRecord, StateCount};

/// Record names per `SCAN` step: a batch is read in one pipeline.
const SCAN_BATCH: usize = 500;

/// idem's keys on one Redis node, as [`RedisStore::key_stats`] counts them.
///
/// ```no_run
/// # async fn show() -> Result<(), idem_runtime::redis::RedisStoreError> {
/// let store = idem_runtime::redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let stats = store.key_stats().await?;
/// println!("{} keys, {} in a lease", stats.total(), stats.in_lease);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisKeyStats {
    /// Keys per state (`started`, `completed`), by age; states without keys are absent.
    pub states: Vec<StateCount>,
    /// Keys in progress whose lease is running.
    pub in_lease: u64,
    /// Keys in progress whose lease ended: the next retry takes over and resumes.
    pub resumable: u64,
    /// The oldest key in progress, if any.
    pub oldest_in_progress: Option<InProgressKey>,
    /// Names of idem's form holding a value idem did not write: requests on them get a
    /// 500, never a replay (see [`RedisStoreError::Foreign`]).
    pub foreign: u64,
    /// Records without a time to live (someone ran `PERSIST` on them): they are never
    /// expired, which idem never asks for.
    pub without_expiry: u64,
    /// Memory the records take (`MEMORY USAGE`), without their phases and counters.
    pub record_bytes: u64,
}

impl RedisKeyStats {
    /// All keys, in every state.
    ///
    /// ```
    /// assert_eq!(idem_runtime::redis::RedisKeyStats::default().total(), 0);
    /// ```
    pub fn total(&self) -> u64 {
        self.states.iter().map(|s| s.ages.total).sum()
    }

    /// Adds another node's counts to these: a cluster's keys are spread over its
    /// masters, and each is counted on its own.
    ///
    /// ```
    /// use idem_runtime::redis::RedisKeyStats;
    ///
    /// let mut all = RedisKeyStats::default();
    /// all.merge(RedisKeyStats::default());
    /// assert_eq!(all, RedisKeyStats::default());
    /// ```
    pub fn merge(&mut self, other: RedisKeyStats) {
        for state in other.states {
            let ages = self.ages_mut(&state.state);
            ages.total += state.ages.total;
            ages.last_hour += state.ages.last_hour;
            ages.last_day += state.ages.last_day;
            ages.last_week += state.ages.last_week;
            ages.older += state.ages.older;
        }
        self.in_lease += other.in_lease;
        self.resumable += other.resumable;
        self.foreign += other.foreign;
        self.without_expiry += other.without_expiry;
        self.record_bytes += other.record_bytes;
        if let Some(key) = other.oldest_in_progress {
            self.offer_oldest(key);
        }
    }

    fn ages_mut(&mut self, state: &str) -> &mut AgeCounts {
        let at = match self.states.iter().position(|s| s.state == state) {
            Some(at) => at,
            None => {
                self.states.push(StateCount {
                    state: state.to_owned(),
                    ages: AgeCounts::default(),
                });
                // A fixed order, so that two reports read alike.
                self.states.sort_by(|a, b| a.state.cmp(&b.state));
                self.states
                    .iter()
                    .position(|s| s.state == state)
                    .unwrap_or_default()
            }
        };
        &mut self.states[at].ages
    }

    fn offer_oldest(&mut self, key: InProgressKey) {
        if self
            .oldest_in_progress
            .as_ref()
            .is_none_or(|old| key.created_at < old.created_at)
        {
            self.oldest_in_progress = Some(key);
        }
    }

    fn count(&mut self, state: &str, age: Duration) {
        const HOUR: Duration = Duration::from_secs(3600);
        let ages = self.ages_mut(state);
        ages.total += 1;
        match age {
            a if a < HOUR => ages.last_hour += 1,
            a if a < 24 * HOUR => ages.last_day += 1,
            a if a < 7 * 24 * HOUR => ages.last_week += 1,
            _ => ages.older += 1,
        }
    }
}

impl RedisStore<ConnectionManager> {
    /// Counts idem's keys on this node, walking them with `SCAN` (which does not block
    /// the server) and reading each batch in one pipeline. On a cluster, count each
    /// master with a store of its own and [`merge`](RedisKeyStats::merge) the counts:
    /// `SCAN` sees one node's keys only.
    pub async fn key_stats(&self) -> Result<RedisKeyStats, RedisStoreError> {
        let mut conn = self.conn.clone();
        let now = server_time(&mut conn).await?;
        let mut stats = RedisKeyStats::default();
        let mut cursor = 0_u64;
        loop {
            let (next, names): (u64, Vec<String>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("idem:{*}")
                .arg("COUNT")
                .arg(SCAN_BATCH)
                .query_async(&mut conn)
                .await?;
            let records: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|name| is_record(name))
                .collect();
            if !records.is_empty() {
                count_batch(&mut conn, &records, now, &mut stats).await?;
            }
            if next == 0 {
                return Ok(stats);
            }
            cursor = next;
        }
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    /// One key as the operator sees it: its state, request, times and stored answer
    /// (the body's first [`BODY_PREVIEW_BYTES`]); `None` when there is no such key.
    /// A value idem did not write there is [`RedisStoreError::Foreign`].
    ///
    /// ```no_run
    /// # async fn show() -> Result<(), idem_runtime::redis::RedisStoreError> {
    /// let store = idem_runtime::redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// if let Some(record) = store.inspect_key("account-7", "order-1").await? {
    ///     println!("{} {} {}", record.state, record.method, record.path);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect_key(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<KeyRecord>, RedisStoreError> {
        let names = KeyNames::new(scope, key);
        let mut conn = self.conn.clone();
        let now = server_time(&mut conn).await?;
        // A value of another type would fail the hash commands: its type is read first.
        let kind: String = ::redis::cmd("TYPE")
            .arg(&names.record)
            .query_async(&mut conn)
            .await?;
        if kind == "none" {
            return Ok(None);
        }
        if kind != "hash" {
            return Err(RedisStoreError::Foreign {
                key: names.record.clone(),
                found: kind,
            });
        }
        let values: Vec<Value> = ::redis::pipe()
            .cmd("HMGET")
            .arg(&names.record)
            .arg(&FIELDS[..])
            .arg(&["fp", "method", "path", "status", "headers", "body"][..])
            .cmd("PTTL")
            .arg(&names.record)
            .cmd("GET")
            .arg(&names.lease)
            .cmd("PTTL")
            .arg(&names.lease)
            .query_async(&mut conn)
            .await?;
        let [fields, ttl, lease, lease_ttl] = take::<4>(values)?;
        let fields: Vec<Option<Vec<u8>>> = parse(fields)?;
        if fields.iter().all(Option::is_none) {
            // Expired between the two reads.
            return Ok(None);
        }
        let state = Fields::read(&names.record, &fields)?;
        let [fingerprint, method, path, status, headers, body] = &fields[FIELDS.len()..] else {
            return Err(RedisStoreError::Reply("HMGET without every field".into()));
        };
        let text = |v: &Option<Vec<u8>>| {
            String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned()
        };
        let live_lease = state.leased_by(&parse::<Option<String>>(lease)?);
        let body = body.as_deref();
        Ok(Some(KeyRecord {
            scope: scope.to_owned(),
            key: key.to_owned(),
            recovery_point: state.point.clone(),
            state: state.state.clone(),
            fingerprint: fingerprint.clone().unwrap_or_default(),
            method: text(method),
            path: text(path),
            created_at: state.created,
            expires_at: after(now, parse(ttl)?),
            locked_until: live_lease
                .then(|| parse(lease_ttl).map(|ms| after(now, ms)))
                .transpose()?,
            response_status: status
                .as_deref()
                .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok()),
            response_headers: headers
                .as_deref()
                .map(split_header_lines)
                .unwrap_or_default(),
            response_body_len: body.map(|b| b.len() as u64),
            response_body_head: body
                .map(|b| b[..b.len().min(BODY_PREVIEW_BYTES)].to_vec())
                .unwrap_or_default(),
        }))
    }
}

/// Counts idem's keys behind `url`: on that node, or, when it is a node of a Redis
/// Cluster, on every master of the cluster (replicas hold copies, and are not counted).
/// The credentials and settings of `url` are used for every node.
///
/// ```no_run
/// # async fn show() -> Result<(), idem_runtime::redis::RedisStoreError> {
/// let stats = idem_runtime::redis::key_stats("redis://127.0.0.1:7000").await?;
/// println!("{} keys, {} resumable", stats.total(), stats.resumable);
/// # Ok(())
/// # }
/// ```
pub async fn key_stats(url: &str) -> Result<RedisKeyStats, RedisStoreError> {
    let node = RedisStore::connect(url).await?;
    let Some(masters) = cluster_masters(&node).await? else {
        return node.key_stats().await;
    };
    let info = ::redis::IntoConnectionInfo::into_connection_info(url)?;
    let mut all = RedisKeyStats::default();
    for (host, port) in masters {
        let at = info.clone().set_addr(ConnectionAddr::Tcp(host, port));
        all.merge(RedisStore::connect_to(at).await?.key_stats().await?);
    }
    Ok(all)
}

/// One key behind `url`, as [`RedisStore::inspect_key`] shows it; on a cluster, the
/// key is read from whichever node holds its slot.
///
/// ```no_run
/// # async fn show() -> Result<(), idem_runtime::redis::RedisStoreError> {
/// let record = idem_runtime::redis::inspect_key("redis://127.0.0.1:6379", "acct", "k1").await?;
/// println!("{:?}", record.map(|r| r.state));
/// # Ok(())
/// # }
/// ```
pub async fn inspect_key(
    url: &str,
    scope: &str,
    key: &str,
) -> Result<Option<KeyRecord>, RedisStoreError> {
    let node = RedisStore::connect(url).await?;
    if cluster_masters(&node).await?.is_none() {
        return node.inspect_key(scope, key).await;
    }
    RedisStore::connect_cluster(&[url])
        .await?
        .inspect_key(scope, key)
        .await
}

/// The masters of the cluster `node` belongs to (`CLUSTER NODES`), or `None` when it
/// runs on its own.
async fn cluster_masters(
    node: &RedisStore<ConnectionManager>,
) -> Result<Option<Vec<(String, u16)>>, RedisStoreError> {
    let mut conn = node.conn.clone();
    let info: String = ::redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await?;
    if !info.lines().any(|line| line.trim() == "cluster_enabled:1") {
        return Ok(None);
    }
    let nodes: String = ::redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await?;
    // `<id> <ip:port@cport[,hostname]> <flags> ...`, one node a line.
    let masters = nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let is_live_master = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let (host, port) = address.split(['@', ',']).next()?.rsplit_once(':')?;
            is_live_master
                .then(|| Some((host.to_owned(), port.parse().ok()?)))
                .flatten()
        })
        .collect();
    Ok(Some(masters))
}

/// The record fields every view reads first, in this order.
const FIELDS: [&str; 5] = ["idem", "state", "token", "created", "point"];

/// What every view reads of a record.
struct Fields {
    state: String,
    token: String,
    created: SystemTime,
    point: String,
}

impl Fields {
    /// The first [`FIELDS`] of a hash under a record's name, or why it is not idem's.
    fn read(record: &str, fields: &[Option<Vec<u8>>]) -> Result<Self, RedisStoreError> {
        let text = |i: usize| {
            fields
                .get(i)
                .and_then(Option::as_deref)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        if text(0).as_deref() != Some("1") {
            return Err(RedisStoreError::Foreign {
                key: record.to_owned(),
                found: "hash without idem's mark".to_owned(),
            });
        }
        let created = text(3)
            .and_then(|ms| ms.parse::<u64>().ok())
            .ok_or_else(|| RedisStoreError::Reply(format!("`{record}` has no creation time")))?;
        Ok(Self {
            state: text(1).unwrap_or_default(),
            token: text(2).unwrap_or_default(),
            created: UNIX_EPOCH + Duration::from_millis(created),
            point: text(4).unwrap_or_default(),
        })
    }

    /// Whether the lease key's token (if any) is this record's: a lease left by an
    /// attempt that was taken over is not the key's lease.
    fn leased_by(&self, lease: &Option<String>) -> bool {
        self.state == "started" && lease.as_deref() == Some(self.token.as_str())
    }
}

/// Reads one `SCAN` batch of records in one pipeline and counts them.
async fn count_batch(
    conn: &mut ConnectionManager,
    records: &[&str],
    now: SystemTime,
    stats: &mut RedisKeyStats,
) -> Result<(), RedisStoreError> {
    // Values of other types would fail the hash commands: the types are read first.
    let mut types = ::redis::pipe();
    for record in records {
        types.cmd("TYPE").arg(*record);
    }
    let kinds: Vec<String> = types.query_async(conn).await?;
    let mut hashes = Vec::with_capacity(records.len());
    for (record, kind) in records.iter().zip(kinds) {
        match kind.as_str() {
            "hash" => hashes.push(*record),
            // Expired between the scan and the read.
            "none" => {}
            _ => stats.foreign += 1,
        }
    }
    if hashes.is_empty() {
        return Ok(());
    }
    let mut pipe = ::redis::pipe();
    for record in &hashes {
        pipe.cmd("HMGET").arg(*record).arg(&FIELDS[..]);
        pipe.cmd("PTTL").arg(*record);
        pipe.cmd("GET").arg(format!("{record}:lease"));
        pipe.cmd("MEMORY")
            .arg("USAGE")
            .arg(*record)
            .arg("SAMPLES")
            .arg(0);
    }
    let values: Vec<Value> = pipe.query_async(conn).await?;
    let mut values = values.into_iter();
    for record in hashes {
        let [fields, ttl, lease, bytes] = take::<4>(values.by_ref().take(4).collect())?;
        let fields: Vec<Option<Vec<u8>>> = parse(fields)?;
        if fields.iter().all(Option::is_none) {
            // Expired between the two reads.
            continue;
        }
        let state = match Fields::read(record, &fields) {
            Ok(state) => state,
            Err(RedisStoreError::Foreign { .. }) => {
                stats.foreign += 1;
                continue;
            }
            Err(other) => return Err(other),
        };
        if parse::<i64>(ttl)? == -1 {
            stats.without_expiry += 1;
        }
        stats.record_bytes += parse::<Option<u64>>(bytes)?.unwrap_or_default();
        stats.count(
            &state.state,
            now.duration_since(state.created).unwrap_or_default(),
        );
        if state.state != "started" {
            continue;
        }
        let leased = state.leased_by(&parse(lease)?);
        if leased {
            stats.in_lease += 1;
        } else {
            stats.resumable += 1;
        }
        if let Some((scope, key)) = scope_and_key(record) {
            stats.offer_oldest(InProgressKey {
                scope,
                key,
                recovery_point: state.point,
                created_at: state.created,
                // The lease's end is only read for the one key `inspect` shows.
                locked_until: None,
            });
        }
    }
    Ok(())
}

/// Whether `name` is a key's record (`idem:{scope:key}`) rather than one of the names
/// beside it (`idem:{scope:key}:lease`, ...). Scope and key are escaped, so a record has
/// exactly one `}`, its last character.
fn is_record(name: &str) -> bool {
    name.starts_with("idem:{") && name.find('}') == Some(name.len() - 1)
}

/// The scope and key a record's name was made from (see `KeyNames::new`).
fn scope_and_key(record: &str) -> Option<(String, String)> {
    let tag = record.strip_prefix("idem:{")?.strip_suffix('}')?;
    let (scope, key) = tag.split_once(':')?;
    Some((unescape(scope)?, unescape(key)?))
}

fn unescape(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = part.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The server's clock: the scripts stamp records with it, so ages are measured on it.
async fn server_time(conn: &mut impl ConnectionLike) -> Result<SystemTime, RedisStoreError> {
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(conn).await?;
    Ok(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// `now` plus a `PTTL` reply; a key without one (`-1`) or gone (`-2`) reads as now.
fn after(now: SystemTime, pttl: i64) -> SystemTime {
    now + Duration::from_millis(u64::try_from(pttl).unwrap_or(0))
}

fn take<const N: usize>(values: Vec<Value>) -> Result<[Value; N], RedisStoreError> {
    let got = values.len();
    values
        .try_into()
        .map_err(|_| RedisStoreError::Reply(format!("{got} replies in a pipeline of {N}")))
}

fn parse<T: ::redis::FromRedisValue>(value: Value) -> Result<T, RedisStoreError> {
    from_redis_value(value).map_err(|e| RedisStoreError::Reply(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_records_are_counted_and_their_names_read_back() {
        let names = KeyNames::new("a:b{", "k}%");
        assert!(is_record(&names.record));
        for other in [
            &names.lease,
            &names.counter,
            &names.phases,
            &names.phase("x}"),
        ] {
            assert!(!is_record(other), "{other}");
        }
        assert_eq!(
            scope_and_key(&names.record),
            Some(("a:b{".to_owned(), "k}%".to_owned()))
        );
    }
}
