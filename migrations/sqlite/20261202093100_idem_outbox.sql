-- The outbox: messages written in the same transaction as the business rows they announce,
-- delivered at least once by idem::Relay.
--
-- No foreign key to idem_keys: a message outlives its key. The expiry sweep must never take
-- an undelivered message with it, and messages may be written outside idempotent handlers.
CREATE TABLE idem_outbox (
    -- Write order, for delivery in that order when nothing is retried. AUTOINCREMENT: a
    -- number is never reused, even after the purge deleted the newest rows.
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The message id consumers deduplicate by (a random version 4 UUID, lowercase); every
    -- delivery of a message carries it.
    id           TEXT    NOT NULL UNIQUE DEFAULT (
        lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4'
        || substr(lower(hex(randomblob(2))), 2) || '-'
        || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2)
        || '-' || lower(hex(randomblob(6)))),
    topic        TEXT    NOT NULL,
    -- JSON text as serde_json wrote it.
    payload      TEXT    NOT NULL,
    -- Times in microseconds since the Unix epoch.
    enqueued_at  INTEGER NOT NULL,
    -- When the relay may take the message next: now when written, later while a relay
    -- holds it or after a failed delivery.
    available_at INTEGER NOT NULL,
    -- Deliveries started, including the one in progress.
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    delivered_at INTEGER
) STRICT;

-- The relay's scan: due, undelivered messages, oldest first.
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, seq) WHERE delivered_at IS NULL;
-- The purge of delivered messages.
CREATE INDEX idem_outbox_delivered ON idem_outbox (delivered_at) WHERE delivered_at IS NOT NULL;
