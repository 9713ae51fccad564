-- Each take of outbox messages by a relay draws a token and writes it to the messages it
-- took; every later write about one of them (starting a delivery, renewing its hold,
-- marking it delivered or failed, giving it back) names that token and changes nothing
-- once another take has replaced it. A relay whose hold ran out can so never undo, mark
-- or count a delivery another relay now runs.
--
-- NULL on messages no relay has taken since this migration: the next take sets it.
ALTER TABLE idem_outbox ADD COLUMN holder bigint;
