//! PostgreSQL connection URLs: another database on the same server, an added query
//! parameter, and the password hidden for messages.

/// Splits a `postgres://` URL into (scheme and authority, path, query-with-`?`).
pub(crate) fn split_url(url: &str) -> (&str, &str, &str) {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (before_query, query) = match url[after_scheme..].find('?') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    };
    match before_query[after_scheme..].find('/') {
        Some(i) => {
            let (base, path) = before_query.split_at(after_scheme + i);
            (base, path, query)
        }
        None => (before_query, "", query),
    }
}

/// The same URL with its database replaced by `database`.
pub(crate) fn with_database(url: &str, database: &str) -> String {
    let (base, _, query) = split_url(url);
    // Keep every query parameter except a `dbname=` that would override the path.
    let params: Vec<&str> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("dbname="))
        .collect();
    if params.is_empty() {
        format!("{base}/{database}")
    } else {
        format!("{base}/{database}?{}", params.join("&"))
    }
}

/// The URL with the query parameter `param` (`name=value`) added.
pub(crate) fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

/// The URL with its password (if any) replaced by `***`, for messages.
pub(crate) fn redact(url: &str) -> String {
    let (base, path, query) = split_url(url);
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let authority = &base[after_scheme..];
    let base = match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &base[..after_scheme],
                &authority[..colon],
                &authority[at..]
            ),
            None => base.to_owned(),
        },
        None => base.to_owned(),
    };
    let query: Vec<String> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            if p.starts_with("password=") {
                "password=***".to_owned()
            } else {
                p.to_owned()
            }
        })
        .collect();
    if query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{}", query.join("&"))
    }
}

// ---------------------------------------------------------------------------------------------
// The private cluster

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            with_database("postgres://h/db?sslmode=disable&dbname=y", "x"),
            "postgres://h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql:///db?host=/tmp", "x"),
            "postgresql:///x?host=/tmp"
        );
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://h/db?password=secret&sslmode=disable"),
            "postgres://h/db?password=***&sslmode=disable"
        );
    }
}
