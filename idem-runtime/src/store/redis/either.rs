//! One connection type for a single node and for a cluster, so that the web layer's one
//! `RedisIdem` type serves both (the generated code finds it by its type).

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

use super::RedisStore;

/// A single node's reconnecting connection, or a cluster's, which follows `MOVED` and
/// `ASK` itself.
#[derive(Clone)]
pub(crate) enum EitherConnection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for EitherConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

impl From<RedisStore<ConnectionManager>> for RedisStore<EitherConnection> {
    fn from(store: RedisStore<ConnectionManager>) -> Self {
        Self {
            conn: EitherConnection::Node(store.conn),
        }
    }
}

impl From<RedisStore<ClusterConnection>> for RedisStore<EitherConnection> {
    fn from(store: RedisStore<ClusterConnection>) -> Self {
        Self {
            conn: EitherConnection::Cluster(store.conn),
        }
    }
}
