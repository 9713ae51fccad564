//! The rules for values: how long keys and leases may be, and which route methods
//! `#[idempotent]` refuses. Each returns the error for the token to change.

use std::time::Duration;

use syn::LitStr;

use crate::parse::KeyArg;
use crate::syntax::RouteMethod;

/// Keys must outlive the longest retry horizon; the protocol sets the floor at a day.
pub(crate) const MIN_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest retention, as written in the docs and errors.
const MAX_RETENTION_TEXT: &str = "100000y";

/// A key's expiry time, now plus the retention, must fit in both databases' timestamps:
/// PostgreSQL's `timestamptz` ends in the year 294276 and SQLite's microseconds since
/// 1970 in a signed 64-bit integer in 294247. 100,000 years (of 365.25 days, as
/// humantime counts them) leaves both far from their end; the runtime binds the
/// retention as microseconds, which it also keeps within `i64`.
const MAX_RETENTION: Duration = Duration::from_secs(100_000 * 31_557_600);

/// Clients are told to come back after `Retry-After: 1`; a shorter lease would let the
/// first duplicate take over an attempt that is merely busy.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// GET, HEAD and the other safe methods are safe to retry already. A route that
/// registers several methods is refused too when one of them is safe: the generated
/// handler asks every request for a key, so a GET without one would get 400.
pub(crate) fn safe_method(method: &RouteMethod, several: bool) -> syn::Error {
    let name = &method.name;
    let message = if several {
        let written = if method.in_route_list {
            format!("`method = \"{name}\"`")
        } else {
            format!("`#[{}]`", name.to_lowercase())
        };
        format!(
            "`#[idempotent]` asks every method of the handler for a key, and {name} is safe \
             to retry already: remove {written} and register the {name} on a handler of its \
             own, without `#[idempotent]`"
        )
    } else {
        format!(
            "`#[idempotent]` does not belong on a {name} route: {name} is safe to retry \
             already; use it on POST, PUT, PATCH or DELETE handlers"
        )
    };
    syn::Error::new(method.span, message)
}

pub(crate) fn retention(lit: &LitStr) -> syn::Result<Duration> {
    let text = lit.value();
    let value = humantime::parse_duration(&text).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!(
                "cannot read `{text}` as a duration ({error}): write e.g. \
                 `retention = \"24h\"` or `retention = \"7d\"`"
            ),
        )
    })?;
    if value < MIN_RETENTION {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "retention `{text}` is under 24h: keys must outlive client retries, so keep \
                 them at least a day, e.g. `retention = \"24h\"`"
            ),
        ));
    }
    if value > MAX_RETENTION {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "retention `{text}` is over `{MAX_RETENTION_TEXT}`: a key's expiry time must \
                 fit in the database's timestamps; write at most \
                 `retention = \"{MAX_RETENTION_TEXT}\"`"
            ),
        ));
    }
    Ok(value)
}

/// `retention` is what was read from the attribute (`None` when it was unreadable, so
/// the comparison is skipped), with its literal if one was written.
pub(crate) fn lease(
    lit: &LitStr,
    retention: Option<(Duration, Option<&LitStr>)>,
) -> syn::Result<Duration> {
    let text = lit.value();
    let value = humantime::parse_duration(&text).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!("cannot read `{text}` as a duration ({error}): write e.g. `lease = \"30s\"`"),
        )
    })?;
    if value < MIN_LEASE {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "lease `{text}` is under 1s: clients retry after `Retry-After: 1`, so a shorter \
                 lease lets a retry take over an attempt that is still working; write e.g. \
                 `lease = \"30s\"`"
            ),
        ));
    }
    if let Some((retention, written)) = retention
        && value > retention
    {
        let retention = match written {
            Some(lit) => format!("retention `{}`", lit.value()),
            None => "the default retention `24h`".to_owned(),
        };
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "lease `{text}` is longer than {retention}: a key must not expire while an \
                 attempt holds it; shorten the lease (a phase that runs longer can extend it)"
            ),
        ));
    }
    Ok(value)
}

/// Where a webhook handler's key comes from, checked.
pub(crate) enum KeySpec {
    /// A request header's name, in lowercase.
    Header(String),
    /// A top-level JSON member's name, or a JSON Pointer.
    Json(String),
}

/// A header name must be an HTTP token (RFC 9110, 5.6.2) and not `Idempotency-Key`,
/// which is the key without `key`; a JSON field must be named, and a JSON Pointer's `~`
/// must escape `0` or `1` (RFC 6901).
pub(crate) fn key(key: &KeyArg) -> syn::Result<KeySpec> {
    match key {
        KeyArg::Header(lit) => {
            let name = lit.value();
            let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "the header name is empty: write the header that carries the event's id, \
                     e.g. `header(\"webhook-id\")`",
                ));
            }
            if let Some(bad) = name.chars().find(|&c| !tchar(c)) {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`{name}` is not a header name: {bad:?} is not allowed in one (letters, \
                         digits and !#$%&'*+-.^_`|~ are)"
                    ),
                ));
            }
            if name.eq_ignore_ascii_case("idempotency-key") {
                return Err(syn::Error::new(
                    lit.span(),
                    "`Idempotency-Key` is the key already when `key` is not given: remove `key`",
                ));
            }
            Ok(KeySpec::Header(name.to_ascii_lowercase()))
        }
        KeyArg::Json(lit) => {
            let field = lit.value();
            if field.is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "the JSON field is empty: name the body's member that holds the event's id, \
                     e.g. `json(\"id\")`, or a JSON Pointer such as `json(\"/data/id\")`",
                ));
            }
            let bad_escape = field.starts_with('/')
                && field
                    .match_indices('~')
                    .any(|(at, _)| !matches!(field.as_bytes().get(at + 1), Some(b'0' | b'1')));
            if bad_escape {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`{field}` is not a JSON Pointer: `~` must be followed by `0` (for `~`) \
                         or `1` (for `/`)"
                    ),
                ));
            }
            Ok(KeySpec::Json(field))
        }
    }
}
