//! Test support for idem: every integration test gets a real, empty PostgreSQL database,
//! and with [`TestSqlite`] a SQLite file of its own.
//!
//! [`TestDb::new`] creates a fresh database with a unique name and [`Drop`] removes it again.
//!
//! Where the databases live:
//!
//! * When the environment variable `DATABASE_URL` is set (and not empty), that server is
//!   used. The database named in the URL is only used to issue `CREATE DATABASE` and
//!   `DROP DATABASE`. An unreachable server is a test failure, never a skip.
//! * Otherwise one private, throwaway PostgreSQL cluster is started per test process, the
//!   first time a test asks for a database. It uses the server binaries found on `PATH` or
//!   under `/usr/lib/postgresql/<version>/bin`, runs with durability switched off, listens on
//!   a free port of 127.0.0.1 and is shut down and deleted when the test process exits, even
//!   when the process is killed: a small shell watchdog waits for the end of a pipe that only
//!   the test process holds open. Set `IDEM_TESTKIT_VERBOSE=1` to have the cluster's
//!   directory, port and start-up time printed on stderr.
//!
//! Fault tests that stop and restart the database use a [`PgCluster`] of their own instead.
//!
//! With `IDEM_TESTKIT_POOLER_URL` set as well (a connection pooler such as PgBouncer in
//! front of the `DATABASE_URL` server, forwarding every database name), [`TestDb::url`] and
//! [`TestDb::pool`] go through the pooler, with sqlx's statement cache off, while
//! [`TestDb::direct_url`] and [`TestDb::direct_pool`] still reach the server itself (for
//! what must not run through a transaction pooler, such as the application's own
//! migrations). `ha/pgbouncer.sh` sets both.

mod cluster;
mod database;
mod names;
mod ports;
mod private;
mod redis;
mod server;
mod sqlite;
mod url;

pub use cluster::{PgCluster, StopMode};
pub use database::TestDb;
pub use ports::free_port;
pub use redis::{RedisCluster, RedisServer};
pub use sqlite::TestSqlite;
