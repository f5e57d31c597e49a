-- As ../0013_idempotency_keys.sql: the Publish API's Idempotency-Key
-- headers per instance, shared by every node.
CREATE TABLE idempotency_keys (
    instance_id TEXT COLLATE "C" NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    key         TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT   NOT NULL,
    token       TEXT   NOT NULL,
    status      INTEGER NOT NULL,
    response    BYTEA  NOT NULL,
    created_ms  BIGINT NOT NULL,
    expires_ms  BIGINT NOT NULL,
    PRIMARY KEY (instance_id, key)
);

CREATE INDEX idempotency_keys_created ON idempotency_keys (instance_id, created_ms);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_ms);
