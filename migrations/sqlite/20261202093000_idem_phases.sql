-- The phased form: leases with fencing tokens, recovery points and recorded phase outputs.

-- SQLite has no sequences: fencing tokens and generations are drawn from this one row, so
-- they only ever grow, for every key, across deletion and reclaim (a token once replaced
-- never matches a key row again). Writers are serialized, so the row is no bottleneck.
CREATE TABLE idem_attempts (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO idem_attempts (id, value) VALUES (1, 0);

-- Keys of the single-transaction form keep 0 (they take no lease); a phased claim and
-- every reclaim draw real values from idem_attempts.
ALTER TABLE idem_keys ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_keys ADD COLUMN fencing_token INTEGER NOT NULL DEFAULT 0;

-- One row per committed phase of a phased key, written in the phase's own transaction
-- together with the key's recovery point. The primary key makes a phase committed at most
-- once per key, whatever attempts run it.
CREATE TABLE idem_phases (
    scope         TEXT    NOT NULL,
    idem_key      TEXT    NOT NULL,
    phase         TEXT    NOT NULL,
    -- The phase's output exactly as serde_json wrote it.
    output        TEXT    NOT NULL,
    -- The attempt that committed the phase.
    fencing_token INTEGER NOT NULL,
    -- Microseconds since the Unix epoch.
    recorded_at   INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key, phase),
    -- The expiry sweep deletes key rows; their phases go with them (sqlx turns SQLite's
    -- foreign_keys on for every connection).
    FOREIGN KEY (scope, idem_key) REFERENCES idem_keys (scope, idem_key) ON DELETE CASCADE
) STRICT;
