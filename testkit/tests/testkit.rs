//! Tests of the test kit itself, against a real PostgreSQL server: the one `DATABASE_URL`
//! names, or the private cluster that the kit starts when it is unset.
//!
//! The private-cluster path is always exercised in child processes (this test binary run again
//! with `DATABASE_URL` removed, selecting one of the `#[ignore]`d `inner_*` tests), so that it is
//! tested whatever the environment of the parent is, and so that the children's exit (normal or
//! SIGKILL) can be checked to remove their clusters.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_testkit::TestDb;

/// Set in the environment of the child processes; the `inner_*` tests do nothing without it,
/// so that `cargo test -- --ignored` does not run them by accident.
const INNER: &str = "IDEM_TESTKIT_INNER";

fn db_name(url: &str) -> &str {
    let path = url.rsplit('/').next().unwrap();
    path.split('?').next().unwrap()
}

#[tokio::test]
async fn two_databases_are_distinct_and_isolated() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    assert_ne!(a.url(), b.url());
    assert!(a.url().starts_with("postgres://"), "{}", a.url());

    let pa = a.pool(2).await;
    let pb = b.pool(2).await;
    let name_a: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pa)
        .await
        .unwrap();
    let name_b: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pb)
        .await
        .unwrap();
    assert_eq!(name_a, db_name(a.url()));
    assert_eq!(name_b, db_name(b.url()));
    assert_ne!(name_a, name_b);

    // Fresh databases are empty.
    for pool in [&pa, &pb] {
        let tables: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(tables, 0);
    }

    sqlx::query("CREATE TABLE only_in_a (id int PRIMARY KEY)")
        .execute(&pa)
        .await
        .unwrap();
    sqlx::query("INSERT INTO only_in_a VALUES (1), (2)")
        .execute(&pa)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM only_in_a")
        .fetch_one(&pa)
        .await
        .unwrap();
    assert_eq!(n, 2);

    let in_b: Option<String> = sqlx::query_scalar("SELECT to_regclass('only_in_a')::text")
        .fetch_one(&pb)
        .await
        .unwrap();
    assert_eq!(in_b, None, "a table of one TestDb is visible in another");
    let err = sqlx::query("SELECT * FROM only_in_a")
        .execute(&pb)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn dropping_removes_the_database_even_with_open_connections() {
    let keeper = TestDb::new().await;
    let keeper_pool = keeper.pool(1).await;

    let doomed = TestDb::new().await;
    let name = db_name(doomed.url()).to_owned();
    let doomed_pool = doomed.pool(1).await;
    sqlx::query("CREATE TABLE t (x int)")
        .execute(&doomed_pool)
        .await
        .unwrap();
    // The pool still holds an open connection; WITH (FORCE) must not mind.
    let started = Instant::now();
    drop(doomed);
    assert!(started.elapsed() < Duration::from_secs(10));

    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&keeper_pool)
            .await
            .unwrap();
    assert!(!exists, "database {name} still exists after drop");
}

/// Each `#[tokio::test]` has its own runtime; databases must be available from all of them,
/// and from runtimes on threads of their own, concurrently.
#[test]
fn works_from_several_runtimes_at_once() {
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let db = TestDb::new().await;
                    let pool = db.pool(1).await;
                    let v: i32 = sqlx::query_scalar("SELECT $1::int + 1")
                        .bind(i)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                    assert_eq!(v, i + 1);
                    db.url().to_owned()
                })
            })
        })
        .collect();
    let mut urls: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    urls.sort();
    urls.dedup();
    assert_eq!(urls.len(), 4);
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

fn inner_command(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        test,
        "--ignored",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(INNER, "1")
    .stdin(Stdio::null());
    cmd
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The cluster directory that an inner test printed (the harness may have printed
/// `test name ... ` before it on the same line).
fn cluster_dir_from(line: &str) -> Option<PathBuf> {
    const TAG: &str = "IDEM_CLUSTER_DIR=";
    let at = line.find(TAG)?;
    Some(PathBuf::from(line[at + TAG.len()..].trim()))
}

/// Processes whose command line mentions `dir`.
fn processes_using(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// Waits (the watchdog works asynchronously) until the cluster is gone, or panics.
fn assert_cluster_removed(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let procs = processes_using(dir);
        if !dir.exists() && procs.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "cluster not cleaned up: dir {} exists: {}, processes: {procs:#?}",
                dir.display(),
                dir.exists()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn private_cluster_without_database_url_is_removed_on_exit() {
    let out = inner_command("inner_private_cluster")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 passed"), "{}", show(&out));
    let dir = stdout
        .lines()
        .find_map(cluster_dir_from)
        .unwrap_or_else(|| panic!("no cluster dir reported\n{}", show(&out)));
    assert_cluster_removed(&dir);
}

#[test]
fn private_cluster_is_removed_when_the_process_is_killed() {
    let mut child = inner_command("inner_private_cluster_then_hang")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut dir = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(d) = cluster_dir_from(&line) {
            dir = Some(d);
            break;
        }
    }
    let Some(dir) = dir else {
        let _ = child.kill();
        panic!(
            "child exited without reporting its cluster: {:?}",
            child.wait()
        );
    };
    assert!(dir.exists());
    assert!(
        !processes_using(&dir).is_empty(),
        "no server running for {}",
        dir.display()
    );
    child.kill().unwrap(); // SIGKILL: no destructor, no atexit, nothing runs in the child
    child.wait().unwrap();
    assert_cluster_removed(&dir);
}

#[test]
fn unreachable_database_url_fails_naming_the_url_without_password() {
    let out = inner_command("inner_create_database")
        .env(
            "DATABASE_URL",
            "postgres://someone:s3cr3t@127.0.0.1:1/postgres",
        )
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let text = show(&out);
    assert!(
        text.contains("postgres://someone:***@127.0.0.1:1/postgres"),
        "{text}"
    );
    assert!(!text.contains("s3cr3t"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Inner tests, run only in child processes
// ---------------------------------------------------------------------------------------------

fn is_inner() -> bool {
    std::env::var_os(INNER).is_some()
}

/// The private cluster directory of this process (the kit names it after the pid).
fn own_cluster_dir() -> PathBuf {
    let prefix = format!("idem-testkit-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .expect("no private cluster directory for this process")
}

#[tokio::test]
#[ignore = "run by private_cluster_without_database_url_is_removed_on_exit"]
async fn inner_private_cluster() {
    if !is_inner() {
        return;
    }
    assert!(std::env::var_os("DATABASE_URL").is_none());
    let a = TestDb::new().await;
    assert!(
        a.url().starts_with("postgres://postgres@127.0.0.1:"),
        "{}",
        a.url()
    );
    assert!(!a.url().contains(":5432/"), "{}", a.url());
    println!("IDEM_CLUSTER_DIR={}", own_cluster_dir().display());

    // A second database, from another runtime on another thread: same cluster, other database.
    let a_url = a.url().to_owned();
    let b_url = std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let b = TestDb::new().await;
                let pool = b.pool(1).await;
                sqlx::query("CREATE TABLE only_in_b (x int)")
                    .execute(&pool)
                    .await
                    .unwrap();
                b.url().to_owned()
            })
    })
    .join()
    .unwrap();
    assert_ne!(a_url, b_url);
    let port = |u: &str| {
        u.rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(port(&a_url), port(&b_url), "one cluster per process");

    let pool = a.pool(3).await;
    let v: String = sqlx::query_scalar("SELECT current_setting('fsync')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(v, "off");
    let in_a: Option<String> = sqlx::query_scalar("SELECT to_regclass('only_in_b')::text")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(in_a, None);
}

#[tokio::test]
#[ignore = "run by private_cluster_is_removed_when_the_process_is_killed"]
async fn inner_private_cluster_then_hang() {
    if !is_inner() {
        return;
    }
    let db = TestDb::new().await;
    let pool = db.pool(1).await;
    sqlx::query("SELECT 1").execute(&pool).await.unwrap();
    println!("IDEM_CLUSTER_DIR={}", own_cluster_dir().display());
    // Wait to be killed (bounded, in case the parent is gone).
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test]
#[ignore = "run by unreachable_database_url_fails_naming_the_url_without_password"]
async fn inner_create_database() {
    if !is_inner() {
        return;
    }
    let db = TestDb::new().await;
    println!("created {}", db.url());
}
