-- POST /payments (the phased form), its provider and the receipts its outbox delivers.

CREATE TABLE payments (
    id                 bigserial   PRIMARY KEY,
    account_id         bigint      NOT NULL,
    amount_cents       bigint      NOT NULL CHECK (amount_cents > 0),
    currency           text        NOT NULL,
    -- created (phase payment_created), charged (phase charged), succeeded (phase
    -- receipt_queued).
    state              text        NOT NULL DEFAULT 'created'
                                   CHECK (state IN ('created', 'charged', 'succeeded')),
    provider_charge_id text,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX payments_account_id ON payments (account_id, id);

-- The payment provider's side (served by the example itself at POST /provider/charges):
-- one charge per provider key, whoever asks how often. The unique constraint is the
-- provider's idempotency: the natural key of the call.
CREATE TABLE provider_charges (
    id           bigserial   PRIMARY KEY,
    provider_key text        NOT NULL UNIQUE,
    amount_cents bigint      NOT NULL,
    currency     text        NOT NULL,
    -- Calls that carried this key: more than 1 means a caller retried, and was answered
    -- with this charge instead of a new one.
    requests     int         NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Receipts the outbox relay delivered, deduplicated by message id; `deliveries` counts
-- how often the relay handed the message over.
CREATE TABLE receipts (
    message_id   uuid        PRIMARY KEY,
    payment_id   bigint      NOT NULL,
    amount_cents bigint      NOT NULL,
    currency     text        NOT NULL,
    deliveries   int         NOT NULL DEFAULT 1,
    delivered_at timestamptz NOT NULL DEFAULT now()
);
