//! `idem expire --once` runs one sweep and prints what it deleted; `--dry-run` only
//! counts; a large sweep on a terminal shows a progress bar.

mod support;

use std::process::Command;

use support::{IDEM, idem_on, insert_completed, insert_in_progress, left, migrated};

#[tokio::test]
async fn one_sweep_deletes_the_expired_keys_and_says_how_many() {
    let (db, pool) = migrated().await;
    insert_completed(&pool, "due", 30, 2 * 86_400, -3600).await;
    insert_completed(&pool, "live", 4, 3600, 3600).await;
    insert_in_progress(&pool, "s", "leased-1", 2 * 86_400, 600).await;

    let dry = idem_on(&db, &["expire", "--once", "--dry-run", "--batch-size", "7"]).success();
    assert_eq!(
        dry,
        "would delete 30 expired keys in 5 batches of at most 7; nothing deleted\n"
    );
    assert_eq!(left(&pool, "due").await, 30, "a dry run deletes nothing");

    let out = idem_on(&db, &["expire", "--once", "--batch-size", "7"]).success();
    assert!(
        out.starts_with("deleted 30 expired keys in 5 batches ("),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(left(&pool, "due").await, 0);
    assert_eq!(left(&pool, "live").await, 4);
    assert_eq!(
        left(&pool, "leased").await,
        1,
        "in progress within its lease"
    );

    let out = idem_on(&db, &["expire", "--once"]).success();
    assert!(
        out.starts_with("deleted 0 expired keys in 0 batches"),
        "{out}"
    );
}

#[tokio::test]
async fn expire_requires_once_and_a_positive_batch_size() {
    let (db, _pool) = migrated().await;
    for args in [
        &["expire"][..],
        &["expire", "--once", "--batch-size", "0"],
        &["expire", "--once", "--pause", "soon"],
    ] {
        let run = idem_on(&db, args);
        assert_eq!(run.0.status.code(), Some(2), "a usage error: {args:?}");
        assert!(run.stderr().starts_with("error: "), "{}", run.stderr());
    }
}

/// Runs `idem` under `script`, which gives it a pseudo-terminal as stdin, stdout and
/// stderr; returns everything it wrote there.
fn on_a_terminal(args: &[&str]) -> String {
    let command = std::iter::once(IDEM)
        .chain(args.iter().copied())
        .map(|arg| format!("'{arg}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env_remove("DATABASE_URL")
        .output()
        .expect("`script` (util-linux) runs the CLI on a pseudo-terminal");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_large_sweep_shows_a_progress_bar_on_a_terminal_only() {
    let (db, pool) = migrated().await;
    // 11 batches of 10: over the 10 batches that make a sweep "large".
    insert_completed(&pool, "due", 110, 2 * 86_400, -60).await;
    let args = [
        "--database-url",
        db.url(),
        "expire",
        "--once",
        "--batch-size",
        "10",
        "--pause",
        "100ms",
    ];
    let screen = on_a_terminal(&args);
    assert!(screen.contains("expiring"), "a progress bar: {screen:?}");
    assert!(screen.contains("deleted 110 expired keys"), "{screen:?}");
    assert_eq!(left(&pool, "due").await, 0);

    // The same sweep with stderr on a pipe: no bar, nothing on stderr.
    insert_completed(&pool, "again", 110, 2 * 86_400, -60).await;
    let out = idem_on(&db, &args[2..]).success();
    assert!(out.starts_with("deleted 110 expired keys"), "{out}");

    // A small sweep on a terminal: no bar either.
    insert_completed(&pool, "small", 100, 2 * 86_400, -60).await;
    let screen = on_a_terminal(&args);
    assert!(
        !screen.contains("expiring"),
        "no bar for 10 batches: {screen:?}"
    );
    assert!(screen.contains("deleted 100 expired keys"), "{screen:?}");
}
