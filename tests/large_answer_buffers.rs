//! After a request that stored or replayed a large answer, the pool's connections give
//! back the megabytes they grew to: sqlx keeps a connection's read and write buffers as
//! large as the largest message they held, so without that a pool of 25 would keep up
//! to 25 copies of the largest answer alive between requests. Both forms, on PostgreSQL:
//! sqlx's SQLite connection has no such buffers (its `shrink_buffers` does nothing).
//!
//! The buffers are sqlx's private state, so the test observes them the only way they
//! can be: as the bytes the process still holds once the answers themselves are dropped,
//! counted by a global allocator of this test binary. It is the binary's only test, so no
//! other test allocates while it counts.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use actix_web::{HttpResponse, web};
use support::app::Account;
use support::{ALICE, Env, post};

/// The system allocator, counting the bytes currently allocated through it.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the counter
// changes nothing about the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` or `realloc` above, that is from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The large answer: 1 MiB, as in the benchmark's memory rows.
const LARGE: usize = 1 << 20;

/// Far below what a kept buffer costs (at least `LARGE`), far above what a new pool
/// connection or a statement cache entry costs.
const SLACK: isize = 256 * 1024;

#[idem::idempotent(scope = account, backend = sqlx::Postgres)]
async fn single(account: Account, size: web::Path<usize>) -> HttpResponse {
    let _ = account;
    HttpResponse::Ok().body(vec![b'x'; size.into_inner()])
}

#[idem::idempotent(scope = account, lease = "30s")]
async fn phased(
    account: Account,
    size: web::Path<usize>,
    phases: idem::Phases<sqlx::Postgres>,
) -> Result<HttpResponse, idem::PhaseError> {
    let _ = account;
    phases
        .run("answered", async |_tx| Ok::<_, idem::PhaseError>(()))
        .await?;
    Ok(HttpResponse::Ok().body(vec![b'x'; size.into_inner()]))
}

/// The bytes still allocated after `path` answered a new key and then replayed it, beyond
/// what was allocated before: each answer is checked and dropped first.
async fn kept_after(app: &support::TestApp, path: &str, key: &str) -> (isize, isize) {
    let before = LIVE.load(Ordering::SeqCst);
    let first = app.call(post(path, ALICE, key, "{}")).await;
    assert_eq!(first.status, 200, "{path}");
    assert!(!first.replayed());
    drop(first);
    let after_first = LIVE.load(Ordering::SeqCst);

    let replay = app.call(post(path, ALICE, key, "{}")).await;
    assert_eq!(replay.status, 200, "{path}");
    assert!(replay.replayed());
    drop(replay);
    let after_replay = LIVE.load(Ordering::SeqCst);
    (after_first - before, after_replay - after_first)
}

#[actix_web::test]
async fn connections_give_back_what_a_large_answer_grew_them_to() {
    let env = Env::<sqlx::Postgres>::open().await;
    let app = support::service_with(&env.idem(), |cfg| {
        cfg.route("/test/single/{size}", web::post().to(single))
            .route("/test/phased/{size}", web::post().to(phased));
    })
    .await;

    for form in ["single", "phased"] {
        // Small answers first, so that the statements are prepared and the connection
        // is open before anything is counted.
        let small = format!("/test/{form}/1000");
        kept_after(&app, &small, &format!("{form}-warm")).await;
        let (grown, grown_by_replay) = kept_after(&app, &small, &format!("{form}-small")).await;
        assert!(
            grown < SLACK && grown_by_replay < SLACK,
            "{form}: small answers kept {grown} and {grown_by_replay} bytes"
        );

        let large = format!("/test/{form}/{LARGE}");
        let (completed, replayed) = kept_after(&app, &large, &format!("{form}-large")).await;
        assert!(
            completed < SLACK,
            "{form}: storing a {LARGE}-byte answer left {completed} bytes allocated"
        );
        assert!(
            replayed < SLACK,
            "{form}: replaying a {LARGE}-byte answer left {replayed} bytes allocated"
        );
    }
}
