-- POST /payments (the phased form), its provider and the receipts its outbox delivers.

CREATE TABLE payments (
    id                 INTEGER PRIMARY KEY,
    account_id         INTEGER NOT NULL,
    amount_cents       INTEGER NOT NULL CHECK (amount_cents > 0),
    currency           TEXT    NOT NULL,
    -- created (phase payment_created), charged (phase charged), succeeded (phase
    -- receipt_queued).
    state              TEXT    NOT NULL DEFAULT 'created'
                               CHECK (state IN ('created', 'charged', 'succeeded')),
    provider_charge_id TEXT,
    created_at         TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'))
) STRICT;

CREATE INDEX payments_account_id ON payments (account_id, id);

-- The payment provider's side (served by the example itself at POST /provider/charges):
-- one charge per provider key, whoever asks how often.
CREATE TABLE provider_charges (
    id           INTEGER PRIMARY KEY,
    provider_key TEXT    NOT NULL UNIQUE,
    amount_cents INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    -- Calls that carried this key: more than 1 means a caller retried.
    requests     INTEGER NOT NULL DEFAULT 1,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'))
) STRICT;

-- Receipts the outbox relay delivered, deduplicated by message id; `deliveries` counts
-- how often the relay handed the message over.
CREATE TABLE receipts (
    message_id   TEXT    PRIMARY KEY,
    payment_id   INTEGER NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    deliveries   INTEGER NOT NULL DEFAULT 1,
    delivered_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'))
) STRICT;
