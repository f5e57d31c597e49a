-- idempotency_keys are the Idempotency-Key headers of the Publish API, per
-- instance (see idempotency.go): a key is claimed (status 0) by the first
-- request that carries it, then holds that request's answer until
-- expires_ms, so a repeat gets the same publishId instead of a second
-- publish, across restarts and on every node sharing the database. While
-- claimed, expires_ms is when the claim lapses (its node died). Expired rows
-- are deleted as the instance's next key is claimed and by the node's sweep.
-- Conventions as in 0001_init.sql.
CREATE TABLE idempotency_keys (
    instance_id TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,  -- hex SHA-256 of the request
    token       TEXT    NOT NULL,  -- the claim's: only it completes or releases the key
    status      INTEGER NOT NULL,  -- the answer's HTTP status; 0 while claimed
    response    BLOB    NOT NULL,  -- the answer's body; empty while claimed
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    PRIMARY KEY (instance_id, key)
) STRICT, WITHOUT ROWID;

-- The oldest first, to make room; the expired first, to purge.
CREATE INDEX idempotency_keys_created ON idempotency_keys (instance_id, created_ms);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_ms);
