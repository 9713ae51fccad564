-- idem's key table. Applied by idem::migrate, recorded in _idem_migrations (not the
-- application's _sqlx_migrations), so it never clashes with the application's history.
CREATE TABLE idem_keys (
    -- Who the key belongs to: the value of the handler's scope parameter.
    scope            text        NOT NULL,
    idem_key         text        NOT NULL CHECK (octet_length(idem_key) BETWEEN 1 AND 255),
    -- SHA-256 over method, path with query, and the (canonicalized) body.
    request_hash     bytea       NOT NULL CHECK (octet_length(request_hash) = 32),
    method           text        NOT NULL,
    path             text        NOT NULL,
    state            text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'completed')),
    recovery_point   text        NOT NULL DEFAULT 'started',
    locked_until     timestamptz,
    response_status  smallint    CHECK (response_status BETWEEN 100 AND 599),
    -- Replayed headers as HTTP/1 header lines ("name: value\r\n"): lossless for any
    -- header value, and readable with convert_from(response_headers, 'LATIN1').
    response_headers bytea,
    -- Exact response bytes; jsonb would reorder keys and change whitespace on replay.
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- created_at plus the handler's retention; the expiry sweep deletes past it.
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (scope, idem_key),
    CHECK (state <> 'completed' OR (response_status IS NOT NULL AND response_body IS NOT NULL))
);

CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at);
