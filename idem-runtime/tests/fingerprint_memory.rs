//! What fingerprinting a large JSON body costs in memory, measured by a counting global
//! allocator (this binary's own, so no other test's allocations are counted). A body of
//! many small array items is the worst case for a parsed tree: each item would cost a
//! whole `serde_json::Value` and more.
//!
//! `cargo test -p idem-runtime --test fingerprint_memory -- --nocapture` prints the peaks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_runtime::Fingerprint;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are
// updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on as it is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The counters are global, so each test of this binary runs alone, from building its
/// body to its last assertion: another test's allocations would count as its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Bytes allocated at the peak of `f`, beyond what was allocated before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = CURRENT.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let value = f();
    (value, PEAK.load(Ordering::Relaxed) - before)
}

/// A JSON array of about `size` bytes whose items come from `item`.
fn array_of(size: usize, item: impl Fn(usize) -> String) -> Vec<u8> {
    let mut body = b"[".to_vec();
    let mut i = 0;
    while body.len() < size {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item(i).as_bytes());
        i += 1;
    }
    body.push(b']');
    body
}

const BODY: usize = 2 << 20;

/// Fingerprints `body`, prints the peak and asserts it is at most `times` the body.
fn assert_bounded(what: &str, body: &[u8], times: usize) {
    let (fingerprint, peak) = peak_of(|| Fingerprint::json("POST", "/orders", body));
    fingerprint.expect("valid JSON");
    println!(
        "{what}: body {} bytes, peak allocation while fingerprinting {peak} bytes",
        body.len()
    );
    assert!(
        peak <= times * body.len(),
        "{what}: fingerprinting a {} byte body allocated {peak} bytes at its peak",
        body.len()
    );
}

// Arrays and scalars are not buffered at all; each small object only while it is read.
#[test]
fn small_numbers_cost_less_than_the_body() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_bounded("[0,1,2,..]", &array_of(BODY, |i| (i % 10).to_string()), 1);
}

#[test]
fn small_objects_cost_less_than_the_body() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_bounded(
        "[{\"id\":..,\"ok\":true},..]",
        &array_of(BODY, |i| format!(r#"{{"ok":true,"id":{i}}}"#)),
        1,
    );
}

#[test]
fn one_large_object_costs_a_small_multiple_of_the_body() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut body = array_of(BODY, |i| format!(r#""k{i}":"v""#));
    body[0] = b'{';
    *body.last_mut().unwrap() = b'}';
    // The one place a body is buffered: an object's members, to sort them.
    assert_bounded("{\"k0\":\"v\",..}", &body, 4);
}
