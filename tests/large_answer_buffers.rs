//! After a request that stored or replayed a large answer, the pool's connections give
//! back the megabytes they grew to: sqlx keeps a connection's read and write buffers as
//! large as the largest message they held, so without that a pool of 25 would keep up
//! to 25 copies of the largest answer alive between requests. And while the answer is
//! stored, it is not held more than the handler's body and the client's copy (the store
//! streams a large body, `store/postgres/staged.rs`). Both forms on both frameworks, on
//! PostgreSQL: sqlx's SQLite connection has no such buffers (its `shrink_buffers` does
//! nothing).
//!
//! The same holds over a real socket: a keep-alive HTTP connection that carried a large
//! answer keeps nothing of it either. actix-web's HTTP/1 dispatcher copies a body into
//! the connection's write buffer, which keeps its size for as long as the connection
//! is open, so idem hands it a large answer in slices of its buffer.
//!
//! The buffers are sqlx's and the frameworks' private state, so the test observes them
//! the only way they can be: as the bytes the process still holds once the answers
//! themselves are dropped, counted by a global allocator of this test binary. It is the
//! binary's only test, and runs the two frameworks one after the other, so no other test
//! allocates while it counts.

mod large_support;
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use support::{ALICE, Env, Framework, post};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The system allocator, counting the bytes currently allocated through it.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The most `LIVE` reached since it was last reset to `LIVE`.
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grow(by: isize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the counter
// changes nothing about the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size() as isize);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` or `realloc` above, that is from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A move to a new block holds both at once; counted as the larger alone, which
        // is the lower bound.
        grow(new_size as isize - layout.size() as isize);
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

/// Waits until every connection of `pool` is back in it: sqlx returns a connection in a
/// task of its own, which sends what the request left queued (a dropped transaction's
/// ROLLBACK) and reads the answer, and only that read lets go of the buffer a replayed
/// row was read into. Bounded, so that a connection that never comes back fails the test
/// instead of hanging it.
async fn settled(pool: &PgPool) {
    for _ in 0..10_000 {
        if pool.num_idle() == pool.size() as usize {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the pool's connections did not come back");
}

/// What one answer cost, in bytes beyond what was allocated before it.
#[derive(Debug)]
struct Cost {
    /// Most alive at once while the new key was answered, stored and committed.
    peak: isize,
    /// Still allocated once that answer was dropped.
    kept: isize,
    /// Still allocated once its replay was dropped too, beyond `kept`.
    kept_by_replay: isize,
    /// Most alive at once while the replay was read and answered, beyond `kept`.
    replay_peak: isize,
}

/// `path` answers a new key, then replays it; each answer is checked and dropped before
/// the count is read.
async fn cost(app: &support::TestApp, pool: &PgPool, path: &str, key: &str, size: usize) -> Cost {
    let expected = large_support::answer(size);
    let is_answer = |body: &[u8]| body == expected.as_slice();
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let first = app.call(post(path, ALICE, key, "{}")).await;
    let peak = PEAK.load(Ordering::SeqCst) - before;
    assert_eq!(first.status, 200, "{path}");
    assert!(!first.replayed());
    assert!(is_answer(&first.body), "{path}: the handler's answer");
    drop(first);
    settled(pool).await;
    let after_first = LIVE.load(Ordering::SeqCst);

    PEAK.store(after_first, Ordering::SeqCst);
    let replay = app.call(post(path, ALICE, key, "{}")).await;
    let replay_peak = PEAK.load(Ordering::SeqCst) - after_first;
    assert_eq!(replay.status, 200, "{path}");
    assert!(replay.replayed());
    assert!(
        is_answer(&replay.body),
        "{path}: the stored answer, byte for byte"
    );
    drop(replay);
    settled(pool).await;
    let after_replay = LIVE.load(Ordering::SeqCst);
    Cost {
        peak,
        kept: after_first - before,
        kept_by_replay: after_replay - after_first,
        replay_peak,
    }
}

#[actix_web::test]
async fn connections_give_back_what_a_large_answer_grew_them_to() {
    let env = Env::<sqlx::Postgres>::open().await;
    // One test for both frameworks, one after the other, so that nothing else allocates
    // while it counts.
    for framework in [Framework::Actix, Framework::Axum] {
        framework.select();
        let app = large_support::app(&env.idem(), false).await;
        for form in ["single", "phased"] {
            let case = format!("{framework:?}-{form}");
            // Small answers first, so that the statements are prepared and the connection
            // is open before anything is counted.
            let small = format!("/test/{form}/1000");
            cost(
                &app,
                &env.served_pool,
                &small,
                &format!("{case}-warm"),
                1000,
            )
            .await;
            let small = cost(
                &app,
                &env.served_pool,
                &small,
                &format!("{case}-small"),
                1000,
            )
            .await;
            eprintln!("{case}, 1000 bytes: {small:?}");
            assert!(
                small.kept < SLACK && small.kept_by_replay < SLACK,
                "{case}: small answers kept {small:?}"
            );

            let large = format!("/test/{form}/{LARGE}");
            let large = cost(
                &app,
                &env.served_pool,
                &large,
                &format!("{case}-large"),
                LARGE,
            )
            .await;
            eprintln!("{case}, {LARGE} bytes: {large:?}");
            // The handler's body and the test client's copy of the answer: with the body
            // bound as a statement parameter, sqlx's arguments and its write buffer
            // (grown to twice the body by the `Bind`) were alive too, about four in all.
            assert!(
                large.peak < 3 * LARGE as isize,
                "{case}: a {LARGE}-byte answer was held more than three times at once: \
                 {large:?}"
            );
            // On axum the answer is one `Bytes` from the handler to the client (the
            // adapter buffers a one-frame body without copying it, and the in-process
            // client reads it the same way), where actix-web's test client copies it: a
            // second copy here means the adapter or the store made one.
            if framework == Framework::Axum {
                assert!(
                    large.peak < 2 * LARGE as isize,
                    "{case}: a {LARGE}-byte answer was held twice at once: {large:?}"
                );
            }
            // Printed, not asserted: sqlx's read may copy a large row once more, or not,
            // depending on how its bytes arrive from the socket (docs/benchmarks-history.md, issue 18).
            eprintln!(
                "{case}: at most {} bytes alive at once during the replay",
                large.replay_peak
            );
            assert!(
                large.kept < SLACK,
                "{case}: storing a {LARGE}-byte answer left bytes allocated: {large:?}"
            );
            assert!(
                large.kept_by_replay < SLACK,
                "{case}: replaying a {LARGE}-byte answer left bytes allocated: {large:?}"
            );
        }
    }
    for framework in [Framework::Actix, Framework::Axum] {
        framework.select();
        let (base, server) = large_support::serve(&env.idem(), false).await;
        for form in ["single", "phased"] {
            let case = format!("{framework:?}-{form}-socket");
            let mut connection = Connection::open(&base).await;
            // The connection, its buffers and the statements exist before anything is
            // counted.
            let small = format!("/test/{form}/1000");
            let warm = format!("{case}-warm");
            connection.answer(&small, &warm, 1000).await;
            connection.answer(&small, &warm, 1000).await;
            settled(&env.served_pool).await;

            let large = format!("/test/{form}/{LARGE}");
            let key = format!("{case}-large");
            let before = LIVE.load(Ordering::SeqCst);
            assert!(!connection.answer(&large, &key, LARGE).await, "{case}");
            // A later answer on the same connection: the server is done with the large
            // one, and has dropped it, once it starts the next.
            connection.answer(&small, &warm, 1000).await;
            settled(&env.served_pool).await;
            let kept = LIVE.load(Ordering::SeqCst) - before;
            assert!(connection.answer(&large, &key, LARGE).await, "{case}");
            connection.answer(&small, &warm, 1000).await;
            settled(&env.served_pool).await;
            let kept_by_replay = LIVE.load(Ordering::SeqCst) - before - kept;
            eprintln!(
                "{case}: kept {kept} bytes after the answer, {kept_by_replay} after the replay"
            );
            assert!(
                kept < SLACK,
                "{case}: a {LARGE}-byte answer left {kept} bytes allocated while its \
                 connection stays open"
            );
            assert!(
                kept_by_replay < SLACK,
                "{case}: a {LARGE}-byte replay left {kept_by_replay} bytes allocated while \
                 its connection stays open"
            );
        }
        server.stop().await;
    }
}

/// A keep-alive HTTP/1.1 connection, spoken by hand: a client library would keep
/// buffers of its own in this process, where the count would mistake them for the
/// server's.
struct Connection(BufReader<TcpStream>);

impl Connection {
    async fn open(base: &str) -> Self {
        let addr = base.strip_prefix("http://").expect("an http base URL");
        Self(BufReader::new(
            TcpStream::connect(addr).await.expect("connects"),
        ))
    }

    /// `POST path` as Alice with `key`; checks that the answer is 200 with the `size`
    /// bytes the handler makes, and says whether it was a replay.
    ///
    /// One 503 `storage-unavailable` is retried, as its problem says a client may: about
    /// one run in two of the whole test command meets one on the first large answer of
    /// the axum single-transaction case (an open bug, not yet explained; nothing was
    /// saved, so the retry is that key's first request). A second one fails the test.
    async fn answer(&mut self, path: &str, key: &str, size: usize) -> bool {
        let (status, body, replayed) = self.send(path, key).await;
        let (status, body, replayed) = if status.starts_with("HTTP/1.1 503 ")
            && String::from_utf8_lossy(&body).contains("#storage-unavailable")
        {
            eprintln!("{path} {key}: 503 storage-unavailable, retried once (open bug)");
            self.send(path, key).await
        } else {
            (status, body, replayed)
        };
        assert!(
            status.starts_with("HTTP/1.1 200 "),
            "{path} {key}: {status:?} {}",
            String::from_utf8_lossy(&body)
        );
        assert!(
            body == large_support::answer(size),
            "{path} {key}: the stored answer, byte for byte"
        );
        replayed
    }

    /// One `POST path` with `key`: the status line, the body and whether it was marked
    /// a replay.
    async fn send(&mut self, path: &str, key: &str) -> (String, Vec<u8>, bool) {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: idem\r\nx-account-id: {ALICE}\r\n\
             idempotency-key: {key}\r\ncontent-type: application/json\r\n\
             content-length: 2\r\n\r\n{{}}"
        );
        self.0
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("sends");
        let mut line = String::new();
        self.0
            .read_line(&mut line)
            .await
            .expect("reads the status line");
        let status = line.clone();
        let (mut length, mut replayed) = (None, false);
        loop {
            line.clear();
            self.0.read_line(&mut line).await.expect("reads a header");
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.strip_prefix("content-length:") {
                length = Some(value.trim().parse::<usize>().expect("a length"));
            }
            replayed |= header == "idempotent-replayed: true";
        }
        // Sized, not chunked: a large answer keeps its `Content-Length`.
        let mut body = vec![0; length.expect("a Content-Length")];
        self.0.read_exact(&mut body).await.expect("reads the body");
        (status, body, replayed)
    }
}
