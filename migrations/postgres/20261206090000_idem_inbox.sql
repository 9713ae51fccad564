-- The consumer inbox: one row per message a consumer has processed, written by
-- idem::Inbox::receive in the same transaction as the consumer's effects, so a redelivered
-- message finds it (and is acknowledged without effects), and a crash before the commit
-- leaves none (and the redelivery is processed). The expiry sweep deletes rows past
-- expires_at.
CREATE TABLE idem_inbox (
    -- The consumer's name: the same message may be processed once by each consumer.
    consumer    text        NOT NULL,
    -- The message's id: idem's Message::id, a broker's message id, a webhook event's id.
    message_id  text        NOT NULL,
    received_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX idem_inbox_expires_at ON idem_inbox (expires_at);
