-- idem's key table on SQLite. Applied by idem::migrate, recorded in _idem_migrations (not
-- the application's _sqlx_migrations), so it never clashes with the application's history.
-- The same columns as on PostgreSQL; STRICT tables keep their types as strictly.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC): exact, ordered, and compared
-- without any parsing. idem writes them with unixepoch('subsec'), so they are precise to
-- the millisecond.
CREATE TABLE idem_keys (
    -- Who the key belongs to: the value of the handler's scope parameter.
    scope            TEXT    NOT NULL,
    idem_key         TEXT    NOT NULL,
    -- SHA-256 over method, path with query, and the (canonicalized) body.
    request_hash     BLOB    NOT NULL,
    method           TEXT    NOT NULL,
    path             TEXT    NOT NULL,
    -- 'started' or 'completed'.
    state            TEXT    NOT NULL DEFAULT 'started',
    recovery_point   TEXT    NOT NULL DEFAULT 'started',
    locked_until     INTEGER,
    response_status  INTEGER,
    -- Replayed headers as HTTP/1 header lines ("name: value\r\n"), lossless for any value.
    response_headers BLOB,
    -- Exact response bytes.
    response_body    BLOB,
    created_at       INTEGER NOT NULL,
    -- created_at plus the handler's retention; the expiry sweep deletes past it.
    expires_at       INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key)
) STRICT;

CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at);
