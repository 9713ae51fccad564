//! A fresh SQLite database per test: a file in a directory of its own under the system's
//! temporary directory, removed with everything SQLite put beside it (`-wal`, `-shm`)
//! when the value is dropped. Nothing to install: SQLite is compiled into sqlx.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// How long a connection waits for another's write lock before `SQLITE_BUSY`; generous,
/// as tests run many at once on a loaded machine.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh, empty SQLite database file; deleted when the value is dropped.
pub struct TestSqlite {
    dir: PathBuf,
    path: PathBuf,
}

impl fmt::Debug for TestSqlite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestSqlite")
            .field("path", &self.path)
            .finish()
    }
}

impl TestSqlite {
    /// Creates the directory that will hold the database; the file itself appears on the
    /// first connection. Panics when the temporary directory is not writable.
    pub fn new() -> TestSqlite {
        let dir = std::env::temp_dir().join(crate::names::unique_db_name());
        std::fs::create_dir(&dir).unwrap_or_else(|error| {
            panic!(
                "idem-testkit: cannot create {} for a SQLite test database: {error}",
                dir.display()
            )
        });
        let path = dir.join("test.db");
        TestSqlite { dir, path }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connection URL of the database (`sqlite://...`), usable by child processes too.
    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    /// A new pool to this database with `max_connections` connections: WAL journal (reads
    /// go on while one connection writes), a 30 s busy timeout, the file created if
    /// missing. Panics when the database cannot be opened.
    pub async fn pool(&self, max_connections: u32) -> SqlitePool {
        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT);
        SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "idem-testkit: cannot open SQLite test database {}: {error}",
                    self.path.display()
                )
            })
    }
}

impl Default for TestSqlite {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestSqlite {
    fn drop(&mut self) {
        // Best effort: a pool still open elsewhere only delays nothing on Unix, where an
        // open file can be unlinked.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
