//! Text for people: the reports of `stats` and `inspect`, and the small formats in them.

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::admin::{InProgressKey, KeyRecord, KeyStats, StateCount, StrandedKey};
use idem_runtime::redis::RedisKeyStats;

/// Most bytes of a stored body `inspect` shows.
const BODY_PREVIEW: usize = 160;

/// The report of `idem stats`.
pub(crate) fn stats(stats: &KeyStats, now: SystemTime) -> String {
    let mut out = String::new();
    state_table(&mut out, &stats.states, stats.total());
    let _ = writeln!(out);
    let _ = writeln!(out, "due for deletion    {}", stats.deletable);
    let _ = writeln!(out, "in a lease          {}", stats.in_lease);
    oldest_in_progress(&mut out, stats.oldest_in_progress.as_ref(), now);
    let _ = writeln!(
        out,
        "stranded            {} (in progress past retention; see `idem stranded`)",
        stats.stranded
    );
    if let Some(key) = &stats.oldest_stranded {
        let _ = writeln!(
            out,
            "oldest stranded     scope {:?} key {:?} at {:?}, created {} ({})",
            key.scope,
            key.key,
            key.recovery_point,
            timestamp(key.created_at),
            relative(key.created_at, now)
        );
    }
    let _ = writeln!(out);
    let index_bytes: u64 = stats.indexes.iter().map(|i| i.bytes).sum();
    let _ = writeln!(
        out,
        "table idem_keys     {} (heap and TOAST)",
        bytes(stats.table_bytes)
    );
    let _ = writeln!(out, "indexes             {}", bytes(index_bytes));
    for index in &stats.indexes {
        let _ = writeln!(out, "  {:<26}{}", index.name, bytes(index.bytes));
    }
    out
}

/// The report of `idem stats --redis-url`: the same table of states and ages, and what
/// Redis has instead of a sweep and a table.
pub(crate) fn redis_stats(stats: &RedisKeyStats, now: SystemTime) -> String {
    let mut out = String::new();
    state_table(&mut out, &stats.states, stats.total());
    let _ = writeln!(out);
    let _ = writeln!(out, "in a lease          {}", stats.in_lease);
    let _ = writeln!(
        out,
        "resumable           {} (lease ended; the next retry takes over)",
        stats.resumable
    );
    oldest_in_progress(&mut out, stats.oldest_in_progress.as_ref(), now);
    let _ = writeln!(out, "not idem's          {}", stats.foreign);
    let _ = writeln!(out, "without expiry      {}", stats.without_expiry);
    let _ = writeln!(
        out,
        "records             {} (expired by Redis; nothing to sweep)",
        bytes(stats.record_bytes)
    );
    out
}

/// The oldest key in progress, and its lease's end when it has one.
fn oldest_in_progress(out: &mut String, key: Option<&InProgressKey>, now: SystemTime) {
    let Some(key) = key else {
        let _ = writeln!(out, "oldest in progress  none");
        return;
    };
    let _ = writeln!(
        out,
        "oldest in progress  scope {:?} key {:?} at {:?}, created {} ({})",
        key.scope,
        key.key,
        key.recovery_point,
        timestamp(key.created_at),
        relative(key.created_at, now)
    );
    if let Some(until) = key.locked_until {
        let _ = writeln!(
            out,
            "                    lease until {} ({})",
            timestamp(until),
            relative(until, now)
        );
    }
}

/// Keys by state and age, one line a state, then the total.
fn state_table(out: &mut String, states: &[StateCount], total: u64) {
    let _ = writeln!(
        out,
        "{:<12}{:>12}{:>12}{:>12}{:>12}{:>12}",
        "keys", "total", "< 1 h", "1 h - 1 d", "1 d - 7 d", "> 7 d"
    );
    for state in states {
        let a = &state.ages;
        let _ = writeln!(
            out,
            "{:<12}{:>12}{:>12}{:>12}{:>12}{:>12}",
            state.state, a.total, a.last_hour, a.last_day, a.last_week, a.older
        );
    }
    let _ = writeln!(out, "{:<12}{:>12}", "all", total);
}

/// The report of `idem stranded`: each key, what committed, and the derived keys an
/// operator looks the provider's calls up by.
pub(crate) fn stranded(keys: &[StrandedKey], steps: &[String], now: SystemTime) -> String {
    let mut out = String::new();
    if keys.is_empty() {
        let _ = writeln!(out, "no stranded keys");
        return out;
    }
    for key in keys {
        let _ = writeln!(out, "scope {:?} key {:?}", key.scope, key.key);
        let _ = writeln!(out, "  request         {} {}", key.method, key.path);
        let _ = writeln!(out, "  recovery point  {}", key.recovery_point);
        let _ = writeln!(
            out,
            "  created         {} ({})",
            timestamp(key.created_at),
            relative(key.created_at, now)
        );
        let _ = writeln!(
            out,
            "  expired         {} ({})",
            timestamp(key.expires_at),
            relative(key.expires_at, now)
        );
        let _ = writeln!(out, "  generation      {}", key.generation);
        if key.phases.is_empty() {
            let _ = writeln!(out, "  phases          none committed");
        }
        for phase in &key.phases {
            let _ = writeln!(
                out,
                "  phase {:?} at {}: {}",
                phase.name,
                timestamp(phase.recorded_at),
                phase.output
            );
        }
        let mut names: Vec<&str> = key.phases.iter().map(|p| p.name.as_str()).collect();
        names.extend(steps.iter().map(String::as_str));
        for name in names {
            let _ = writeln!(out, "  derived key {name:?}: {}", key.derived_key(name));
        }
    }
    out
}

/// The report of `idem inspect`.
pub(crate) fn record(r: &KeyRecord, now: SystemTime) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<16}{value}");
    };
    line("scope", &format!("{:?}", r.scope));
    line("key", &format!("{:?}", r.key));
    line("state", &r.state);
    line("recovery point", &r.recovery_point);
    line("fingerprint", &hex(&r.fingerprint));
    line("request", &format!("{} {}", r.method, r.path));
    line(
        "created",
        &format!(
            "{} ({})",
            timestamp(r.created_at),
            relative(r.created_at, now)
        ),
    );
    line(
        "expires",
        &format!(
            "{} ({})",
            timestamp(r.expires_at),
            relative(r.expires_at, now)
        ),
    );
    line(
        "locked until",
        &r.locked_until.map_or_else(
            || "-".to_owned(),
            |t| format!("{} ({})", timestamp(t), relative(t, now)),
        ),
    );
    line(
        "status",
        &r.response_status.map_or("-".to_owned(), |s| s.to_string()),
    );
    if r.response_headers.is_empty() {
        line("headers", "-");
    }
    for (i, (name, value)) in r.response_headers.iter().enumerate() {
        let label = if i == 0 { "headers" } else { "" };
        line(label, &format!("{name}: {}", printable(value)));
    }
    match r.response_body_len {
        None => line("body", "-"),
        Some(len) => {
            let shown = &r.response_body_head[..r.response_body_head.len().min(BODY_PREVIEW)];
            let more = if (shown.len() as u64) < len {
                "…"
            } else {
                ""
            };
            line("body", &format!("{len} bytes: {}{more}", printable(shown)));
        }
    }
    out
}

/// Bytes as text, with control characters and invalid UTF-8 escaped so one value stays
/// on one line.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Sizes in binary units, one decimal.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

pub(crate) fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub(crate) fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// RFC 3339 in UTC, to the second.
pub(crate) fn timestamp(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01), computed in
/// 400-year eras of 146097 days whose years start on March 1st, so the leap day is the
/// last day of a year.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// "3h 5m ago" or "in 20h 1m".
pub(crate) fn relative(t: SystemTime, now: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(ago) => format!("{} ago", span(ago)),
        Err(ahead) => format!("in {}", span(ahead.duration())),
    }
}

fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `500ms`, `20s`, `5m`, `1h`: what `--pause` accepts.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write e.g. 20ms, 1s or 5m"))?;
    let seconds_per_unit = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "`{text}` has no known unit: write ms, s, m, h or d, e.g. 20ms"
            ));
        }
    };
    // Checked: a product that wrapped (release builds do not trap) would keep a key for a
    // moment instead of the years asked for. The bound is a policy's, whose expiry time the
    // databases can store.
    n.checked_mul(seconds_per_unit)
        .map(Duration::from_secs)
        .filter(|duration| *duration <= idem_runtime::Policy::MAX_RETENTION)
        .ok_or_else(|| format!("`{text}` is longer than 100000 years: write at most 36525000d"))
}

/// The URL without its password, for error messages.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    match authority[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &authority[..colon],
            &url[scheme_end + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(timestamp(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        assert_eq!(timestamp(t), "2026-12-01T00:00:00Z");
        let t = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(timestamp(t), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn relative_times_read_naturally() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(relative(now - Duration::from_secs(59), now), "59s ago");
        assert_eq!(
            relative(now - Duration::from_secs(3 * 3600 + 300), now),
            "3h 5m ago"
        );
        assert_eq!(
            relative(now + Duration::from_secs(86_400 + 7200), now),
            "in 1d 2h"
        );
    }

    #[test]
    fn sizes_durations_hex_and_previews() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(8192), "8.0 KiB");
        assert_eq!(bytes(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(printable(b"a\r\nb\xff"), "a\\r\\nb\u{fffd}");
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn a_duration_too_long_to_count_is_refused_not_wrapped() {
        // 2^64 / 86_400 + 1 days: the product does not fit in a u64.
        assert_eq!(
            parse_duration("213503982334602d"),
            Err(
                "`213503982334602d` is longer than 100000 years: write at most 36525000d"
                    .to_owned()
            )
        );
        assert!(parse_duration("36525001d").is_err());
        assert_eq!(
            parse_duration("36525000d"),
            Ok(idem_runtime::Policy::MAX_RETENTION)
        );
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/shop?sslmode=disable"),
            "postgres://app:***@db:5432/shop?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://postgres@127.0.0.1/x"),
            "postgres://postgres@127.0.0.1/x"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
