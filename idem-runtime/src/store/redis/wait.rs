//! `WAIT` on a Redis Cluster, sent to the master of one idem key.

use std::time::Duration;

use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::keys::KeyNames;
use super::{RedisStore, RedisStoreError, millis};

impl RedisStore<ClusterConnection> {
    /// Waits until `replicas` replicas of the master serving the key `key` of `scope`
    /// (the one a [`RedisRequest`](super::RedisRequest) names) acknowledged
    /// every write this store's connection to that master sent before (`WAIT` on that
    /// master), or `timeout` passed; returns how many did.
    ///
    /// [`wait_for_replicas`](RedisStore::wait_for_replicas) on a cluster connection is
    /// sent by the client to every master and answers the least count: one master
    /// without a replica (just after a failover) holds every key's completion back. This
    /// asks only the master of the key's slot.
    ///
    /// `WAIT` counts the writes of this client connection only: a replay read on a
    /// connection made after the completion was written has nothing to wait for, and
    /// answers at once with every replica in sync.
    ///
    /// A replica's acknowledgement is not a consensus: the write is in that replica's
    /// memory, not on its disk, and a failover that promotes another replica, or one that
    /// had not yet received it, can still lose it.
    ///
    /// ```no_run
    /// # async fn run(
    /// #     store: idem_runtime::redis::RedisStore<redis::cluster_async::ClusterConnection>,
    /// #     attempt: idem_runtime::redis::Attempt,
    /// # ) -> Result<(), idem_runtime::redis::RedisStoreError> {
    /// use std::time::Duration;
    /// if store.complete(&attempt, 202, b"", b"{}").await? {
    ///     let acked = store
    ///         .wait_for_replicas_of("account-7", "key-1", 1, Duration::from_millis(500))
    ///         .await?;
    ///     if acked < 1 {
    ///         // Not on a replica yet: answer 503, the client's retry replays it.
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for_replicas_of(
        &self,
        scope: &str,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32, RedisStoreError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("WAIT");
        cmd.arg(replicas).arg(millis(timeout));
        let route = Route::with_key(
            KeyNames::new(scope, key).record.as_bytes(),
            SlotAddr::Master,
        );
        let value = conn
            .route_command(
                cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
            )
            .await?;
        let acked: i64 = ::redis::from_redis_value(value).map_err(::redis::RedisError::from)?;
        Ok(u32::try_from(acked).unwrap_or(0))
    }
}
