//! The server's memory, read from `/proc/<pid>/status`.

use std::fs;

/// Peak resident set (`VmHWM`) and current resident set (`VmRSS`), in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    pub(crate) peak_kib: u64,
    pub(crate) rss_kib: u64,
}

pub(crate) fn read(pid: u32) -> Option<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    Some(Memory {
        peak_kib: field("VmHWM:")?,
        rss_kib: field("VmRSS:")?,
    })
}

/// Resets the peak to the current resident set (Linux 4.0 and later), so that each
/// measurement shows its own peak rather than the largest so far. Returns false where
/// the kernel refuses; the peaks are then cumulative, and the report says so.
pub(crate) fn reset_peak(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}
