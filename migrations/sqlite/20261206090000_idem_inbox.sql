-- The consumer inbox: one row per message a consumer has processed, written by
-- idem::Inbox::receive in the same transaction as the consumer's effects, so a redelivered
-- message finds it (and is acknowledged without effects), and a crash before the commit
-- leaves none (and the redelivery is processed). The expiry sweep deletes rows past
-- expires_at. Times are INTEGER microseconds since the Unix epoch, as in idem_keys.
CREATE TABLE idem_inbox (
    -- The consumer's name: the same message may be processed once by each consumer.
    consumer    TEXT    NOT NULL,
    -- The message's id: idem's Message::id, a broker's message id, a webhook event's id.
    message_id  TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) STRICT;

CREATE INDEX idem_inbox_expires_at ON idem_inbox (expires_at);
