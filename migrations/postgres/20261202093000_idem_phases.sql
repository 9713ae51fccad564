-- The phased form: leases with fencing tokens, recovery points and recorded phase outputs.

-- Fencing tokens and generations are drawn from one sequence, so they only ever grow, for
-- every key, across deletion and reclaim: a token once replaced never matches a key row
-- again, however long its attempt sleeps.
CREATE SEQUENCE idem_attempts AS bigint;

-- Constant defaults, so adding the columns does not rewrite an existing key table. Keys
-- of the single-transaction form keep 0 (they take no lease); a phased claim and every
-- reclaim draw real values from idem_attempts.
ALTER TABLE idem_keys
    -- Stays fixed for the life of the key row; a key reused after its retention starts a
    -- new generation. Derived provider keys are computed from it.
    ADD COLUMN generation    bigint NOT NULL DEFAULT 0,
    -- The attempt allowed to write for this key; a takeover replaces it.
    ADD COLUMN fencing_token bigint NOT NULL DEFAULT 0;

-- One row per committed phase of a phased key, written in the phase's own transaction
-- together with the key's recovery point. The primary key makes a phase committed at
-- most once per key, whatever attempts run it.
CREATE TABLE idem_phases (
    scope         text        NOT NULL,
    idem_key      text        NOT NULL,
    phase         text        NOT NULL CHECK (octet_length(phase) BETWEEN 1 AND 200),
    -- The phase's output as serde_json wrote it; json (not jsonb) keeps the exact text.
    output        json        NOT NULL,
    -- The attempt that committed the phase.
    fencing_token bigint      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (scope, idem_key, phase),
    -- The expiry sweep deletes key rows; their phases go with them.
    FOREIGN KEY (scope, idem_key) REFERENCES idem_keys (scope, idem_key) ON DELETE CASCADE
);
