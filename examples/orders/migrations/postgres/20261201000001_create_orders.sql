-- The example's own table, recorded in sqlx's default _sqlx_migrations table.
-- idem records its own schema in _idem_migrations, so the two histories never meet.
CREATE TABLE orders (
    id           bigserial   PRIMARY KEY,
    account_id   bigint      NOT NULL,
    item         text        NOT NULL,
    quantity     int         NOT NULL,
    amount_cents bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- GET /orders lists one account's orders by id.
CREATE INDEX orders_account_id ON orders (account_id, id);
