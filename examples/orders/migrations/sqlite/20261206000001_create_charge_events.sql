-- POST /webhooks/provider: the payment provider's charge.succeeded events, one row per
-- event processed. No unique constraint on event_id: idem's key (the webhook-id) is what
-- keeps a redelivered event from being recorded twice, and the tests count rows per id.
CREATE TABLE charge_events (
    id           INTEGER PRIMARY KEY,
    event_id     TEXT    NOT NULL,
    charge_id    TEXT    NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    received_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'))
) STRICT;

CREATE INDEX charge_events_event_id ON charge_events (event_id);
