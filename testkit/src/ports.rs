//! Free loopback ports for the servers tests and harnesses start: picked distinct and
//! outside the range the kernel hands out on its own.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// A TCP port on 127.0.0.1 that nothing listens on, distinct from every port this
/// process picked before, below the kernel's ephemeral range.
///
/// A port is picked before the program that listens on it starts, often seconds before
/// (a failover cluster is laid out at once, and its standby starts only once the primary
/// is ready). Binding port 0 and letting go has two ways to hand out a port that is
/// taken by then: the kernel gives the same port to two calls in a row often enough
/// (within a hundred picks, measured), so two servers share a port and the one that
/// starts second cannot listen (a PostgreSQL under Patroni then exits and is restarted
/// again and again); and an outgoing connection can take a port of that range as its
/// local end, which then stays taken through TIME_WAIT. Below the range the kernel
/// hands out nothing on its own, and a counter keeps this process's picks apart.
///
/// ```
/// let a = idem_testkit::free_port().unwrap();
/// let b = idem_testkit::free_port().unwrap();
/// assert_ne!(a, b);
/// std::net::TcpListener::bind(("127.0.0.1", a)).unwrap();
/// ```
pub fn free_port() -> Result<u16, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low();
    let first = low.saturating_sub(PRIVATE_SPAN).max(1024);
    let span = u32::from(low - first);
    if span == 0 {
        return Err(format!(
            "no ports below the ephemeral range (it starts at {low}): \
             see /proc/sys/net/ipv4/ip_local_port_range"
        ));
    }
    // Start where this process's id points, so that two harnesses at once rarely try
    // the same ports.
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = first + (start.wrapping_add(n) % span) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!(
        "no free port on 127.0.0.1 between {first} and {low}"
    ))
}

/// How many ports below the ephemeral range [`free_port`] draws from.
const PRIVATE_SPAN: u16 = 8_192;

/// Where the kernel's ephemeral port range starts; Linux's default where it cannot be
/// read. Read once per process: the setting does not change under a test run.
fn ephemeral_low() -> u16 {
    static LOW: OnceLock<u16> = OnceLock::new();
    *LOW.get_or_init(|| {
        fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32_768)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failover cluster lays out ten ports before anything listens on them; a few
    /// hundred picks in a row, none bound, must still be distinct (picked by binding
    /// port 0, three runs repeated a port at the 73rd to 90th pick).
    #[test]
    fn ports_picked_before_any_is_bound_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..500 {
            let port = free_port().unwrap();
            assert!(seen.insert(port), "pick {i} repeated port {port}");
        }
    }

    /// No outgoing connection can take a port below the ephemeral range as its local
    /// end.
    #[test]
    fn ports_are_below_the_ephemeral_range() {
        let low = ephemeral_low();
        for _ in 0..50 {
            let port = free_port().unwrap();
            assert!(
                port < low,
                "port {port} is in the ephemeral range from {low}"
            );
        }
    }

    /// A port handed out can be listened on.
    #[test]
    fn a_picked_port_can_be_bound() {
        let port = free_port().unwrap();
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }
}
