-- POST /webhooks/provider: the payment provider's charge.succeeded events, one row per
-- event processed. No unique constraint on event_id: idem's key (the webhook-id) is what
-- keeps a redelivered event from being recorded twice, and the tests count rows per id.
CREATE TABLE charge_events (
    id           bigserial   PRIMARY KEY,
    event_id     text        NOT NULL,
    charge_id    text        NOT NULL,
    amount_cents bigint      NOT NULL,
    currency     text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX charge_events_event_id ON charge_events (event_id);
