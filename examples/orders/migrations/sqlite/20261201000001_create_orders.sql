-- The example's own table on SQLite, recorded in sqlx's default _sqlx_migrations table.
-- idem records its own schema in _idem_migrations, so the two histories never meet.
CREATE TABLE orders (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL,
    item         TEXT    NOT NULL,
    quantity     INTEGER NOT NULL,
    amount_cents INTEGER NOT NULL,
    -- UTC, in the shape the API shows (SQLite's clock has milliseconds; the zeros keep
    -- the width of PostgreSQL's microseconds).
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'))
) STRICT;

-- GET /orders lists one account's orders by id.
CREATE INDEX orders_account_id ON orders (account_id, id);
