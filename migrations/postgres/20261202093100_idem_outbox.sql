-- The outbox: messages written in the same transaction as the business rows they announce,
-- delivered at least once by idem::Relay.
--
-- No foreign key to idem_keys: a message outlives its key. The expiry sweep must never take
-- an undelivered message with it, and messages may be written outside idempotent handlers.
CREATE TABLE idem_outbox (
    -- The message id consumers deduplicate by; every delivery of a message carries it.
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Write order, for delivery in that order when nothing is retried.
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    topic        text        NOT NULL CHECK (octet_length(topic) BETWEEN 1 AND 200),
    payload      json        NOT NULL,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    -- When the relay may take the message next: now when written, later while a relay
    -- holds it or after a failed delivery.
    available_at timestamptz NOT NULL DEFAULT now(),
    -- Deliveries started, including the one in progress.
    attempts     int         NOT NULL DEFAULT 0,
    last_error   text,
    delivered_at timestamptz
);

-- The relay's scan: due, undelivered messages, oldest first.
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, seq) WHERE delivered_at IS NULL;
-- The purge of delivered messages.
CREATE INDEX idem_outbox_delivered ON idem_outbox (delivered_at) WHERE delivered_at IS NOT NULL;
