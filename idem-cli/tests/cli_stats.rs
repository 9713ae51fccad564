//! `idem stats` shows the keys by state and age, what is due, the oldest key in
//! progress, and the table's and indexes' sizes.

mod support;

use support::{idem_on, insert_completed, insert_in_progress, migrated};

#[tokio::test]
async fn stats_count_by_state_and_age() {
    let (db, pool) = migrated().await;
    insert_completed(&pool, "recent", 3, 60, 86_000).await;
    insert_completed(&pool, "hours", 5, 5 * 3600, 3600).await;
    insert_completed(&pool, "days", 2, 3 * 86_400, -60).await;
    insert_completed(&pool, "weeks", 1, 10 * 86_400, -60).await;
    insert_in_progress(&pool, "acct-9", "pay-1", 2 * 3600, 300).await;
    insert_in_progress(&pool, "acct-7", "pay-2", 600, 300).await;

    let out = idem_on(&db, &["stats"]).success();
    let line = |label: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("a line for {label}:\n{out}"))
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
    // total, < 1 h, 1 h - 1 d, 1 d - 7 d, > 7 d
    assert_eq!(line("completed"), ["11", "3", "5", "2", "1"], "{out}");
    assert_eq!(line("started"), ["2", "1", "1", "0", "0"], "{out}");
    assert_eq!(line("all"), ["13"], "{out}");
    assert_eq!(line("due for deletion"), ["for", "deletion", "3"], "{out}");
    assert_eq!(line("in a lease"), ["a", "lease", "2"], "{out}");
    let oldest = line("oldest in progress").join(" ");
    assert!(
        oldest.starts_with("in progress scope \"acct-9\" key \"pay-1\" at \"charged\", created "),
        "{out}"
    );
    assert!(oldest.ends_with("(2h 0m ago)"), "{out}");
    assert!(out.contains("table idem_keys"), "{out}");
    assert!(out.contains("  idem_keys_expires_at"), "{out}");
    assert!(out.contains("  idem_keys_pkey"), "{out}");
}

#[tokio::test]
async fn stats_of_an_empty_table() {
    let (db, _pool) = migrated().await;
    let out = idem_on(&db, &["stats"]).success();
    assert!(out.contains("oldest in progress  none"), "{out}");
    assert!(out.contains("due for deletion    0"), "{out}");
}
