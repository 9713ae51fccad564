-- The CHECK constraints of idem's tables restate what the runtime already guarantees
-- (a key is 1 to 255 visible ASCII characters, a fingerprint is 32 bytes, only idem's
-- own statements write the state and the response, phase names are checked before
-- they are written), and PostgreSQL re-reads every check expression for each
-- statement that writes a row: measured with callgrind, they were a third of the
-- database's work per first execution and half of it per replay (BENCHMARKS.md).
ALTER TABLE idem_keys
    DROP CONSTRAINT IF EXISTS idem_keys_idem_key_check,
    DROP CONSTRAINT IF EXISTS idem_keys_request_hash_check,
    DROP CONSTRAINT IF EXISTS idem_keys_state_check,
    DROP CONSTRAINT IF EXISTS idem_keys_response_status_check,
    DROP CONSTRAINT IF EXISTS idem_keys_check;

ALTER TABLE idem_phases DROP CONSTRAINT IF EXISTS idem_phases_phase_check;
