-- A large stored body on its way into idem_keys.response_body: the completion sends it
-- with COPY .. FROM STDIN in chunks (a bound parameter is copied whole into the driver's
-- buffers) and its UPDATE deletes the row and stores the body in the same transaction,
-- so the table is empty whenever no completion is running. A row can only be left
-- behind where the completion ran outside a transaction (a handler that committed
-- idem's transaction itself) and its UPDATE then failed; such rows are never read again.
-- UNLOGGED: a row never outlives its transaction, so writing it to the WAL (the body is
-- written there once more by the UPDATE) would buy nothing.
CREATE UNLOGGED TABLE idem_staged_bodies (
    -- The key's scope, so that the table can be co-located with idem_keys.
    scope     text        NOT NULL,
    -- Chosen at random by the completion that staged the row.
    nonce     bigint      NOT NULL,
    body      bytea       NOT NULL,
    staged_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, nonce)
);
